package redistest

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/netns"
	"github.com/dtsched/dts/internal/testwait"
)

// Sentinel timings: a master silent for SentinelDownAfter is down, and a
// failover that has not finished in SentinelFailoverTimeout is tried
// again. Short, so that a test sees a failover within seconds.
const (
	SentinelDownAfter       = 500 * time.Millisecond
	SentinelFailoverTimeout = 2 * time.Second
)

// Sentinels is a Redis master, one replica of it and three sentinels that
// watch it under the name MasterName, quorum 2, every one on a free
// loopback port (StartSentinelsIn: on a host of its own) in a directory
// of its own, like Start's servers. The two data servers require
// Password, the sentinels SentinelPassword.
//
// The sentinels are redis-server --sentinel, which is what Debian's
// redis-sentinel runs.
//
// Kill the master with Master.Stop (SIGKILL): within a few seconds the
// sentinels promote the replica (WaitMaster).
type Sentinels struct {
	// Master and Replica are the data servers as started; after a
	// failover Replica is the master.
	Master, Replica *Server
	sentinels       []*Server
}

// Names and passwords of every Sentinels.
const (
	MasterName       = "dts"
	Password         = "dts-data-pw"
	SentinelPassword = "dts-sentinel-pw"
)

// StartSentinels starts a master, its replica and three sentinels, and
// returns once the replica is in sync and every sentinel knows the replica
// and the other two sentinels, so that a failover can start at once. All
// five are stopped when the test ends.
func StartSentinels(t testing.TB) *Sentinels {
	t.Helper()
	return startSentinels(t, make([]*netns.Host, 5))
}

// StartSentinelsIn is StartSentinels with each of the five on a host of
// its own: hosts are the master's, the replica's and the three
// sentinels', in that order. The replica replicates from the master's
// host address and the sentinels announce their hosts' addresses, so
// every link between them is a link between two hosts, and a partition
// cuts it.
func StartSentinelsIn(t testing.TB, hosts ...*netns.Host) *Sentinels {
	t.Helper()
	if len(hosts) != 5 {
		t.Fatalf("redistest: StartSentinelsIn takes 5 hosts (master, replica, 3 sentinels), got %d", len(hosts))
	}
	return startSentinels(t, hosts)
}

// startSentinels starts the five, each on its host in hosts (nil: on
// the loopback of this process's namespace).
func startSentinels(t testing.TB, hosts []*netns.Host) *Sentinels {
	t.Helper()
	g := &Sentinels{}
	t.Cleanup(g.stop)
	on := func(s *Server, h *netns.Host) *Server {
		if h != nil {
			s.host, s.netns = h.IP, h.File()
		}
		return s
	}
	// No wait for more replicas before a full sync starts (5 s by default).
	data := []string{"--requirepass", Password, "--masterauth", Password, "--repl-diskless-sync-delay", "0"}
	var err error
	if g.Master, err = launchNew(on(&Server{password: Password, args: data}, hosts[0])); err != nil {
		t.Fatalf("redistest: sentinel master: %v", err)
	}
	replicaOf := slices.Concat(data, []string{"--replicaof", g.Master.bindHost(), strconv.Itoa(g.Master.port)})
	replica := on(&Server{password: Password, args: replicaOf}, hosts[1])
	if replica.host != "" {
		// What the master and, through it, the sentinels give as the
		// replica's address: the one the clients reach it at.
		replica.args = append(replica.args, "--replica-announce-ip", replica.host)
	}
	if g.Replica, err = launchNew(replica); err != nil {
		t.Fatalf("redistest: sentinel replica: %v", err)
	}
	testwait.NoError(t, startTimeout, "the sentinels' replica to sync (redistest)", func() error {
		info, err := command(g.Replica.Addr(), Password, "INFO", "replication")
		if err == nil && !strings.Contains(info, "master_link_status:up") {
			err = errors.New("its master link is not up")
		}
		return err
	})
	// A sentinel finds the replica in the master's INFO, which it reads at
	// once when it starts and only every 10 s after: the replica is in
	// sync first.
	conf := fmt.Sprintf(`sentinel monitor %[1]s %[7]s %[2]d 2
sentinel down-after-milliseconds %[1]s %[3]d
sentinel failover-timeout %[1]s %[4]d
sentinel parallel-syncs %[1]s 1
sentinel auth-pass %[1]s %[5]s
requirepass %[6]s
sentinel sentinel-pass %[6]s
`, MasterName, g.Master.port, SentinelDownAfter.Milliseconds(), SentinelFailoverTimeout.Milliseconds(), Password, SentinelPassword, g.Master.bindHost())
	for _, h := range hosts[2:] {
		s := on(&Server{password: SentinelPassword, sentinel: conf}, h)
		if h != nil {
			// The address the other sentinels and the clients reach this
			// one at, whatever its socket to the master shows.
			s.sentinel += "sentinel announce-ip " + h.IP + "\n"
		}
		if s, err = launchNew(s); err != nil {
			t.Fatalf("redistest: sentinel: %v", err)
		}
		g.sentinels = append(g.sentinels, s)
	}
	want := fmt.Sprintf("name=%s,status=ok,address=%s,slaves=1,sentinels=3", MasterName, g.Master.Addr())
	testwait.NoError(t, startTimeout, "the sentinels to know the replica and each other (redistest)", func() error {
		for _, s := range g.sentinels {
			info, err := command(s.Addr(), SentinelPassword, "INFO", "sentinel")
			if err != nil {
				return err
			}
			if !strings.Contains(info, want) {
				return fmt.Errorf("sentinel %s does not say %q yet", s.Addr(), want)
			}
		}
		return nil
	})
	return g
}

// Addrs are the sentinels' host:port addresses.
func (g *Sentinels) Addrs() []string {
	addrs := make([]string, len(g.sentinels))
	for i, s := range g.sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// URL is redis://:Password@MASTER/0, the master as started. Through
// Sentinel a client takes only the password and database from it.
func (g *Sentinels) URL() string {
	return "redis://:" + Password + "@" + g.Master.Addr() + "/0"
}

// MasterAddr is the master's address as the first sentinel that answers
// gives it.
func (g *Sentinels) MasterAddr() (string, error) {
	var err error
	for _, s := range g.sentinels {
		var info string
		if info, err = command(s.Addr(), SentinelPassword, "INFO", "sentinel"); err != nil {
			continue
		}
		_, rest, ok := strings.Cut(info, "name="+MasterName+",")
		if _, addr, ok2 := strings.Cut(rest, "address="); ok && ok2 {
			addr, _, _ = strings.Cut(addr, ",")
			return addr, nil
		}
		err = fmt.Errorf("sentinel %s does not monitor %s: %q", s.Addr(), MasterName, info)
	}
	return "", err
}

// WaitMaster waits up to timeout for the sentinels to name addr the
// master, and for addr to say it is one.
func (g *Sentinels) WaitMaster(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	testwait.NoError(t, timeout, "the sentinels to name "+addr+" the master (redistest)", func() error {
		got, err := g.MasterAddr()
		if err != nil {
			return err
		}
		if got != addr {
			return fmt.Errorf("they name %q", got)
		}
		info, err := command(addr, Password, "INFO", "replication")
		if err == nil && !strings.Contains(info, "role:master") {
			err = fmt.Errorf("%s does not say it is the master yet", addr)
		}
		return err
	})
}

// stop stops the sentinels first, so that none acts on the others
// stopping, then the data servers.
func (g *Sentinels) stop() {
	for _, s := range append(g.sentinels, g.Replica, g.Master) {
		if s != nil {
			s.Stop()
		}
	}
}
