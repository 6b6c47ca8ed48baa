package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/childproc"
)

// PairDatabase is the empty database StartPair creates on the primary. The
// services migrate it themselves, as in production.
const PairDatabase = "dts"

// Pair is a primary and a streaming standby of its own, for failover tests:
// unlike the shared server, each pair belongs to one test and may be killed,
// frozen and promoted. Each node runs in a dts-pgtest-* directory of its
// own (so a leftover is found and removed like the shared server's); Kill
// and Pause reach the postmaster and every backend at once; and it dies
// with the test binary (Pdeathsig; its backends exit on postmaster death).
type Pair struct {
	Primary, Standby *Node
}

// Node is one PostgreSQL server of a Pair.
type Node struct {
	Name string
	host string // the address it listens on and is reached at
	dir  string // removed at cleanup
	data string
	port int
	log  string
	bin  string
	cred *syscall.Credential

	netns     string // its network namespace, or "" for this process's
	hostSide  string // the host's address on the veth pair to its namespace
	nsCleanup func()

	mu   sync.Mutex // guards proc
	proc *childproc.Process
}

// PairOptions chooses how the standby replicates.
type PairOptions struct {
	// Sync makes the standby synchronous (synchronous_standby_names = '*',
	// synchronous_commit = on): a commit is acknowledged only once the
	// standby has flushed it. Otherwise replication is asynchronous.
	Sync bool
	// PartitionablePrimary runs the primary in a network namespace of its
	// own, joined to this one by a veth pair, so that Partition can cut
	// it off. It needs root and iproute2; StartPair fails the test
	// without them.
	PartitionablePrimary bool
}

// StartPair starts a primary with the database PairDatabase and a standby
// streaming from it (pg_basebackup -R), waits until the standby streams
// (and, with Sync, is the synchronous one), and stops and removes both when
// the test ends. Durability is PostgreSQL's (fsync aside, which only
// matters when the machine, not a process, crashes).
func StartPair(t testing.TB, opt PairOptions) *Pair {
	t.Helper()
	p, err := startPair(t, opt)
	if err != nil {
		t.Fatalf("pgtest: start pair: %v", err)
	}
	return p
}

func startPair(t testing.TB, opt PairOptions) (*Pair, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		if cred, err = postgresCredential(); err != nil {
			return nil, err
		}
	}
	p := &Pair{}
	if p.Primary, err = newNode(t, "primary", bin, cred); err != nil {
		return nil, err
	}
	if p.Standby, err = newNode(t, "standby", bin, cred); err != nil {
		return nil, err
	}
	if opt.PartitionablePrimary {
		if err := p.Primary.isolate(t); err != nil {
			return nil, err
		}
	}

	if err := initCluster(p.Primary.bin, p.Primary.dir, p.Primary.data, p.Primary.cred); err != nil {
		return nil, fmt.Errorf("%s: %w", p.Primary.Name, err)
	}
	if opt.PartitionablePrimary {
		// initdb trusts loopback only; this side reaches the primary over
		// the veth pair.
		hba, err := os.OpenFile(filepath.Join(p.Primary.data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		_, err = hba.WriteString("host all all 10.213.0.0/16 trust\nhost replication all 10.213.0.0/16 trust\n")
		hba.Close()
		if err != nil {
			return nil, err
		}
	}
	// synchronous_standby_names is set only once the standby streams: a
	// commit before that would wait for it.
	if err := p.Primary.start(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := p.Primary.exec(ctx, "CREATE DATABASE "+PairDatabase); err != nil {
		return nil, err
	}
	if err := p.Standby.command("pg_basebackup", "-R", "-X", "stream", "--no-sync", "-c", "fast",
		"-h", p.Primary.host, "-p", strconv.Itoa(p.Primary.port), "-U", "postgres", "-D", p.Standby.data); err != nil {
		return nil, err
	}
	if err := p.Standby.start(); err != nil {
		return nil, err
	}
	want := "async"
	if opt.Sync {
		want = "sync"
		if err := p.Primary.exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
			return nil, err
		}
		if err := p.Primary.exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			return nil, err
		}
	}
	for {
		var state string
		err := p.Primary.queryRow(ctx, "SELECT coalesce(max(sync_state), '') FROM pg_stat_replication WHERE state = 'streaming'", &state)
		if err == nil && state == want {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("standby not %s after %s (state %q, %v)\n%s", want, startTimeout, state, err, p.Standby.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// newNode makes the directory of a node named name, removed (with its
// processes) when the test ends.
func newNode(t testing.TB, name, bin string, cred *syscall.Credential) (*Node, error) {
	base := tempBase(cred)
	removeStale(base, dirPrefix)
	dir, err := os.MkdirTemp(base, dirPrefix+name+"-")
	if err != nil {
		return nil, fmt.Errorf("make temp dir: %w", err)
	}
	n := &Node{Name: name, host: "127.0.0.1", dir: dir, data: filepath.Join(dir, "data"), log: filepath.Join(dir, "postgres.log"), bin: bin, cred: cred}
	t.Cleanup(n.remove)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("write owner file: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("chown %s to postgres: %w", dir, err)
		}
	}
	return n, nil
}

// URL is the libpq multi-host URL of PairDatabase over both nodes, primary
// first, with target_session_attrs=read-write: a client connects to
// whichever accepts writes, the promoted standby once the primary is gone.
func (p *Pair) URL() string {
	return fmt.Sprintf("postgres://postgres@%s:%d,%s:%d/%s?sslmode=disable&target_session_attrs=read-write",
		p.Primary.host, p.Primary.port, p.Standby.host, p.Standby.port, PairDatabase)
}

// Port is the node's TCP port.
func (n *Node) Port() int { return n.port }

// URL is the node's own URL of dbname.
func (n *Node) URL(dbname string) string {
	return fmt.Sprintf("postgres://postgres@%s:%d/%s?sslmode=disable", n.host, n.port, dbname)
}

// Kill SIGKILLs the postmaster and every backend at once, as a crash of its
// machine would end them (the kernel resets their connections), and waits
// for the postmaster to exit.
func (n *Node) Kill() { n.signalAll(syscall.SIGKILL, true) }

// Pause SIGSTOPs the postmaster and every backend: their connections stay
// open and the kernel still acknowledges what clients send, but nothing
// answers, as when a machine or VM freezes.
func (n *Node) Pause() { n.signalAll(syscall.SIGSTOP, false) }

// Resume SIGCONTs what Pause stopped.
func (n *Node) Resume() { n.signalAll(syscall.SIGCONT, false) }

// Promote makes a standby the primary (pg_promote, what pg_ctl promote or
// Patroni do) and returns once it accepts writes.
func (n *Node) Promote(ctx context.Context) error {
	var ok bool
	if err := n.queryRow(ctx, "SELECT pg_promote(true, 60)", &ok); err != nil {
		return fmt.Errorf("promote %s: %w", n.Name, err)
	}
	if !ok {
		return fmt.Errorf("promote %s: pg_promote returned false\n%s", n.Name, n.logTail())
	}
	return nil
}

// Query runs sql on the node's database dbname and scans its one row.
func (n *Node) Query(ctx context.Context, dbname, sql string, dest ...any) error {
	conn, err := pgx.Connect(ctx, n.URL(dbname))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql).Scan(dest...)
}

// signalAll sends sig to the postmaster and every process it forked. A
// process group does not reach them: each child of the postmaster calls
// setsid. The postmaster is stopped first so that it forks no child while
// they are listed.
func (n *Node) signalAll(sig syscall.Signal, wait bool) {
	n.mu.Lock()
	proc := n.proc
	n.mu.Unlock()
	if proc == nil {
		return
	}
	pm := proc.Cmd.Process.Pid
	_ = syscall.Kill(pm, syscall.SIGSTOP)
	for _, pid := range children(pm) {
		_ = syscall.Kill(pid, sig)
	}
	_ = syscall.Kill(pm, sig)
	if sig != syscall.SIGSTOP {
		_ = syscall.Kill(pm, syscall.SIGCONT)
	}
	if wait {
		select {
		case <-proc.Exited():
		case <-time.After(stopTimeout):
		}
	}
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) S ppid ...": the fields after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

func (n *Node) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, n.URL("postgres"))
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %s: %w", n.Name, sql, err)
	}
	return nil
}

func (n *Node) queryRow(ctx context.Context, sql string, dest ...any) error {
	return n.Query(ctx, "postgres", sql, dest...)
}

// command runs one of the server's tools as the server's user.
func (n *Node) command(name string, args ...string) error {
	cmd := exec.Command(filepath.Join(n.bin, name), args...)
	cmd.Dir = n.dir
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred, Setpgid: true}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", n.Name, name, err, out)
	}
	return nil
}

// start runs the postmaster on a free port and waits until it accepts
// connections (a standby: read-only ones).
func (n *Node) start() error {
	for attempt := 1; ; attempt++ {
		port, err := childproc.FreePort()
		if err != nil {
			return err
		}
		err = n.run(port)
		if err == nil || !errors.Is(err, errPortTaken) || attempt == 5 {
			return err
		}
	}
}

func (n *Node) run(port int) error {
	logFile, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(n.bin, "postgres"),
		"-D", n.data,
		"-c", "listen_addresses="+n.host,
		"-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories="+n.dir,
		"-c", "fsync=off",
		"-c", "synchronous_commit=on",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
		"-c", "autovacuum=off",
		"-c", "wal_level=replica",
		"-c", "max_wal_senders=5",
		"-c", "hot_standby=on",
		"-c", "wal_receiver_status_interval=1s",
		"-c", "wal_sender_timeout=5s",
		"-c", "wal_receiver_timeout=5s",
		// In the data directory: killed nodes must not leave segments in
		// /dev/shm (see the server's flags in pgtest.go).
		"-c", "dynamic_shared_memory_type=mmap",
	)
	cmd.Dir = n.dir
	cmd.Env = childEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred, Setpgid: true}
	proc, err := childproc.StartInNetns(cmd, n.netnsFile())
	if err != nil {
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	n.mu.Lock()
	n.proc, n.port = proc, port
	n.mu.Unlock()

	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var one int
		err := n.queryRow(ctx, "SELECT 1", &one)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-proc.Exited():
			log := n.logTail()
			n.mu.Lock()
			n.proc = nil
			n.mu.Unlock()
			if strings.Contains(log, "could not bind") || strings.Contains(log, "could not create any TCP/IP sockets") {
				return fmt.Errorf("%w: %d", errPortTaken, port)
			}
			return fmt.Errorf("%s exited during start-up: %s\n%s", n.Name, cmd.ProcessState, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v\n%s", n.Name, startTimeout, err, n.logTail())
		}
	}
}

// netnsFile is the file of the node's network namespace, or "".
func (n *Node) netnsFile() string {
	if n.netns == "" {
		return ""
	}
	return "/var/run/netns/" + n.netns
}

var netSeq atomic.Int64

// isolate makes a network namespace for the node, joined to this one by a
// veth pair on a /30 of 10.213.0.0/16, and removed at cleanup. Without
// root or iproute2 it fails the test.
func (n *Node) isolate(t testing.TB) error {
	if os.Geteuid() != 0 {
		t.Fatal("pgtest: a partitionable primary needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("pgtest: a partitionable primary needs iproute2 (ip; deploy/local/prereqs.sh test installs it)")
	}
	seq := netSeq.Add(1)
	// Names unique across concurrent test binaries: the pid and a sequence.
	tag := fmt.Sprintf("%d-%d", os.Getpid()%100000, seq)
	n.netns = "dtspg-" + tag
	hostIf, nsIf := "dpa"+tag, "dpb"+tag
	// A /30 from the pid and the sequence: 16,384 of them.
	block := (os.Getpid()*64 + int(seq)) % 16384
	n.hostSide = fmt.Sprintf("10.213.%d.%d", block/64, (block%64)*4+1)
	n.host = fmt.Sprintf("10.213.%d.%d", block/64, (block%64)*4+2)
	ip := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := ip("netns", "add", n.netns); err != nil {
		t.Fatalf("pgtest: cannot make a network namespace: %v", err)
	}
	// Recorded, so that removeStale deletes it if this binary dies first.
	_ = os.WriteFile(filepath.Join(n.dir, netnsFileName), []byte(n.netns), 0o644)
	n.nsCleanup = func() {
		_ = ip("netns", "del", n.netns) // takes nsIf, and so hostIf, with it
		_ = ip("link", "del", hostIf)
	}
	for _, args := range [][]string{
		{"link", "add", hostIf, "type", "veth", "peer", "name", nsIf},
		{"link", "set", nsIf, "netns", n.netns},
		{"addr", "add", n.hostSide + "/30", "dev", hostIf},
		{"link", "set", hostIf, "up"},
		{"netns", "exec", n.netns, "ip", "addr", "add", n.host + "/30", "dev", nsIf},
		{"netns", "exec", n.netns, "ip", "link", "set", nsIf, "up"},
		{"netns", "exec", n.netns, "ip", "link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			return err
		}
	}
	return nil
}

// Partition cuts a node started with PartitionablePrimary off without a
// reset: from then on, everything it sends to this side is dropped (a
// blackhole route), so clients and the standby hear nothing from it, not
// even the acknowledgement of what they send or of a connection attempt.
func (n *Node) Partition() error {
	if n.netns == "" {
		return errors.New("pgtest: Partition needs PairOptions.PartitionablePrimary")
	}
	if out, err := exec.Command("ip", "netns", "exec", n.netns, "ip", "route", "add", "blackhole", n.hostSide+"/32").CombinedOutput(); err != nil {
		return fmt.Errorf("partition %s: %w: %s", n.Name, err, out)
	}
	return nil
}

// remove kills the node's processes, stopped or not, and deletes its
// directory.
func (n *Node) remove() {
	n.signalAll(syscall.SIGKILL, true)
	n.mu.Lock()
	n.proc = nil
	n.mu.Unlock()
	if n.nsCleanup != nil {
		n.nsCleanup()
	}
	_ = os.RemoveAll(n.dir)
}

func (n *Node) logTail() string {
	b, _ := os.ReadFile(n.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return strings.TrimSpace(string(b))
}
