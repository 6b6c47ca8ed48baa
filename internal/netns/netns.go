// Package netns gives a test a network of hosts on one machine: each host
// is a Linux network namespace with an address of its own on a private
// /24, all joined by one bridge, so that a test can run each component of
// a system on its own host and cut the links between them.
//
// Why it is shaped this way: faults between hosts (a partition of one link,
// one direction of it, a link healed) are what distributed code must
// survive, and loopback cannot express them: every process shares one
// address. A namespace per host makes each link a pair of addresses, and a
// partition an iptables rule in one host's namespace that drops what it
// sends to (and, for a full partition, receives from) the other's address,
// so only that link is cut and every other keeps working, the test's own
// connections from the bridge's address included.
//
// What must stay true:
//   - Everything New makes is removed when the test ends, failed or not:
//     the namespaces (and with them their veth ends), the bridge. A test
//     binary that dies first leaves them behind; the next New removes
//     those of test binaries that no longer run (their pid is in the name).
//   - Each Network's /24 is one no other network on this machine uses at
//     the time (10.214.0.0/16; pgtest's partitionable nodes use
//     10.213.0.0/16), so concurrent test binaries do not collide.
//   - Processes started in a host (Host.File with childproc.StartInNetns,
//     or Host.Command) are the caller's to stop, before the network goes.
//
// It needs root, iproute2 (ip) and iptables; New fails the test without
// them. Only _test.go files import this package.
package netns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dtsched/dts/internal/childproc"
)

const (
	namePrefix = "dtsh-" // namespaces: dtsh-<pid>-<seq>-<host>
	bridgePre  = "dtsb"  // bridges: dtsb<pid>.<seq>
	vethPre    = "dtsv"  // host-side veth ends: dtsv<pid>.<seq>.<host>, base 36
	netsDir    = "/var/run/netns"
	maxHosts   = 200 // .10 to .209 of the /24
	firstHost  = 10
	ruleChain  = "DTS" // every partition rule lives in this chain
	subnetBase = "10.214"
)

var seq atomic.Int64

// Network is a bridge on a private /24 and the hosts joined to it. Its
// methods are safe for concurrent use.
type Network struct {
	// Gateway is the bridge's address, this process's on the network: the
	// test reaches every host from it, and partitions never cut it.
	Gateway string
	// Subnet is the network's /24, e.g. 10.214.7.0/24.
	Subnet string

	t      testing.TB
	id     string // unique among the live networks of this machine
	seq    int64  // this process's number for the network
	net    int    // third octet of the /24
	bridge string

	mu    sync.Mutex
	hosts []*Host
	rules map[rule]bool // partition rules in force
}

// Host is one network namespace of a Network, with one address.
type Host struct {
	// Name is the name the test gave it ("postgres", "worker-a").
	Name string
	// IP is its address on the network.
	IP string
	// Netns is the namespace's name, as `ip netns` lists it.
	Netns string
}

// File is the namespace's file, as childproc.StartInNetns takes it.
func (h *Host) File() string { return filepath.Join(netsDir, h.Netns) }

// rule is one DROP in from's namespace of what it sends to (out) or gets
// from (in) to's address.
type rule struct {
	from, to *Host
	out      bool
}

// New makes an empty network: a bridge with Gateway on a /24 of its own.
// It is removed with its hosts when the test ends. Without root,
// iproute2 or iptables it fails the test: `make test` installs them and
// runs as root (a skipped test would check nothing).
func New(t testing.TB) *Network {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("netns: hosts need root (network namespaces, iptables)")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := lookTool(tool); err != nil {
			t.Fatalf("netns: %s not found (deploy/local/prereqs.sh test installs it)", tool)
		}
	}
	// Choosing a free /24 and taking it is one step for every test binary
	// of the machine: unlocked, two networks made at once both found the
	// same /24 free, and their hosts' veth ends clashed by name.
	unlock, err := lockMachine()
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	defer unlock()
	removeStale()
	n := &Network{t: t, rules: map[rule]bool{}}
	n.seq = seq.Add(1)
	n.id = fmt.Sprintf("%d-%d", os.Getpid(), n.seq)
	t.Cleanup(n.remove)
	used, err := usedSubnets()
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	// Start from the pid so that binaries run one after another reuse
	// different /24s; skip any in use.
	start := os.Getpid() % 256
	for i := 0; i < 256; i++ {
		octet := (start + i) % 256
		if used[octet] {
			continue
		}
		n.net = octet
		n.bridge = fmt.Sprintf("%s%d.%d", bridgePre, os.Getpid(), seq.Add(1)%1000)
		n.Gateway = fmt.Sprintf("%s.%d.1", subnetBase, octet)
		n.Subnet = fmt.Sprintf("%s.%d.0/24", subnetBase, octet)
		if err := ip("link", "add", n.bridge, "type", "bridge"); err != nil {
			continue // another binary's bridge of that name
		}
		if err := ip("addr", "add", n.Gateway+"/24", "dev", n.bridge); err != nil {
			_ = ip("link", "del", n.bridge)
			continue
		}
		if err := ip("link", "set", n.bridge, "up"); err != nil {
			t.Fatalf("netns: %v", err)
		}
		return n
	}
	n.bridge = ""
	t.Fatalf("netns: no free /24 in %s.0.0/16", subnetBase)
	return nil
}

// AddHost makes a namespace named after name, joined to the bridge by a
// veth pair, with the next free address, loopback up and an empty DTS
// chain that INPUT and OUTPUT jump to (the partition rules go there).
func (n *Network) AddHost(name string) *Host {
	n.t.Helper()
	n.mu.Lock()
	i := len(n.hosts)
	if i >= maxHosts {
		n.mu.Unlock()
		n.t.Fatalf("netns: more than %d hosts", maxHosts)
	}
	h := &Host{Name: name, IP: fmt.Sprintf("%s.%d.%d", subnetBase, n.net, firstHost+i),
		Netns: fmt.Sprintf("%s%s-%s", namePrefix, n.id, sanitize(name))}
	n.hosts = append(n.hosts, h)
	n.mu.Unlock()

	// Named after the process and the network, not the /24: a namespace
	// outlives its network's cleanup while anything holds it (a process
	// inside, an open file of it), and its veth's host end with it, so a
	// later network on the same /24 would find the name taken. 15 bytes
	// at most (IFNAMSIZ): a pid is at most 5 digits in base 36.
	veth := fmt.Sprintf("%s%s.%s.%s", vethPre, strconv.FormatInt(int64(os.Getpid()), 36),
		strconv.FormatInt(n.seq%1296, 36), strconv.FormatInt(int64(i), 36))
	steps := [][]string{
		{"netns", "add", h.Netns},
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.Netns},
		{"link", "set", veth, "master", n.bridge},
		{"link", "set", veth, "up"},
		{"-n", h.Netns, "addr", "add", h.IP + "/24", "dev", "eth0"},
		{"-n", h.Netns, "link", "set", "eth0", "up"},
		{"-n", h.Netns, "link", "set", "lo", "up"},
	}
	for _, args := range steps {
		if err := ip(args...); err != nil {
			n.t.Fatalf("netns: host %s: %v", name, err)
		}
	}
	for _, args := range [][]string{
		{"-N", ruleChain},
		{"-A", "INPUT", "-j", ruleChain},
		{"-A", "OUTPUT", "-j", ruleChain},
	} {
		if err := h.iptables(args...); err != nil {
			n.t.Fatalf("netns: host %s: %v", name, err)
		}
	}
	return h
}

// Hosts lists the hosts in the order they were added.
func (n *Network) Hosts() []*Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Host(nil), n.hosts...)
}

// Partition cuts the link between a and b both ways: a drops what it
// sends to b and what it gets from b. Established connections stall (no
// reset is sent), new ones time out. Links to other hosts and to the
// gateway are untouched.
func (n *Network) Partition(a, b *Host) error {
	if err := n.add(rule{a, b, true}); err != nil {
		return err
	}
	return n.add(rule{a, b, false})
}

// PartitionOneWay drops only what from sends to to: to's packets still
// reach from, from's answers do not. Over TCP both directions stall (the
// acknowledgements are lost), over UDP only one.
func (n *Network) PartitionOneWay(from, to *Host) error { return n.add(rule{from, to, true}) }

// Heal removes every partition rule between a and b, made in either's
// namespace, one-way ones included.
func (n *Network) Heal(a, b *Host) error {
	n.mu.Lock()
	var drop []rule
	for r := range n.rules {
		if (r.from == a && r.to == b) || (r.from == b && r.to == a) {
			drop = append(drop, r)
		}
	}
	n.mu.Unlock()
	var errs []error
	for _, r := range drop {
		if err := r.from.iptables(r.spec("-D")...); err != nil {
			errs = append(errs, err)
			continue
		}
		n.mu.Lock()
		delete(n.rules, r)
		n.mu.Unlock()
	}
	return errors.Join(errs...)
}

// HealAll removes every partition rule of the network.
func (n *Network) HealAll() error {
	var errs []error
	for _, h := range n.Hosts() {
		errs = append(errs, h.iptables("-F", ruleChain))
	}
	n.mu.Lock()
	clear(n.rules)
	n.mu.Unlock()
	return errors.Join(errs...)
}

func (n *Network) add(r rule) error {
	n.mu.Lock()
	if n.rules[r] {
		n.mu.Unlock()
		return nil
	}
	n.mu.Unlock()
	if err := r.from.iptables(r.spec("-A")...); err != nil {
		return err
	}
	n.mu.Lock()
	n.rules[r] = true
	n.mu.Unlock()
	return nil
}

func (r rule) spec(op string) []string {
	if r.out {
		return []string{op, ruleChain, "-d", r.to.IP, "-j", "DROP"}
	}
	return []string{op, ruleChain, "-s", r.to.IP, "-j", "DROP"}
}

// Command is cmd run in the host's namespace (ip netns exec).
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	ipPath, _ := lookTool("ip")
	return exec.Command(ipPath, append([]string{"netns", "exec", h.Netns, name}, args...)...)
}

// Run runs a command in the host's namespace and returns its error with
// its output.
func (h *Host) Run(name string, args ...string) error {
	if out, err := h.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), h.Name, err, out)
	}
	return nil
}

func (h *Host) iptables(args ...string) error {
	bin, _ := lookTool("iptables")
	return h.Run(bin, append([]string{"-w"}, args...)...)
}

// Listen listens in the host's namespace: the socket is made there, and
// stays there whatever thread later uses it.
func (h *Host) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := h.do(func() (err error) { ln, err = net.Listen(network, addr); return err })
	return ln, err
}

// ListenPacket is Listen for a packet socket (UDP).
func (h *Host) ListenPacket(network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := h.do(func() (err error) { pc, err = net.ListenPacket(network, addr); return err })
	return pc, err
}

// Dial connects from the host's namespace. The socket is made there
// before connect, so the connection's packets follow the host's rules.
func (h *Host) Dial(d *net.Dialer, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.do(func() (err error) { c, err = d.Dial(network, addr); return err })
	return c, err
}

// do runs fn on a thread moved into the host's namespace, and moves the
// thread back. A thread that cannot be moved back is left locked, so Go
// ends it with the goroutine instead of running other code in the host's
// namespace.
func (h *Host) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open(h.File())
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: %w", h.Netns, err)
			return
		}
		err = fn()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// remove deletes the hosts' namespaces (their veth pairs go with them)
// and the bridge.
func (n *Network) remove() {
	for _, h := range n.Hosts() {
		_ = ip("netns", "del", h.Netns)
	}
	if n.bridge != "" {
		_ = ip("link", "del", n.bridge)
	}
}

// lockMachine takes an exclusive flock on the namespaces' directory, held
// by one Network of one process at a time; the kernel releases it if the
// process dies.
func lockMachine() (unlock func(), err error) {
	if err := os.MkdirAll(netsDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Open(netsDir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", netsDir, err)
	}
	return func() { f.Close() }, nil
}

// usedSubnets is the third octets of the 10.214.x.0/24s with an address on
// this machine's (this namespace's) interfaces.
func usedSubnets() (map[int]bool, error) {
	out, err := exec.Command(mustTool("ip"), "-4", "-o", "addr", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("ip addr show: %w", err)
	}
	used := map[int]bool{}
	for _, f := range strings.Fields(string(out)) {
		if rest, ok := strings.CutPrefix(f, subnetBase+"."); ok {
			if octet, _, ok := strings.Cut(rest, "."); ok {
				if v, err := strconv.Atoi(octet); err == nil {
					used[v] = true
				}
			}
		}
	}
	return used, nil
}

// removeStale deletes the namespaces of test binaries that no longer run,
// and their bridges.
func removeStale() {
	entries, _ := os.ReadDir(netsDir)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), namePrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(pidText); err == nil && !childproc.Alive(pid) {
			_ = ip("netns", "del", e.Name())
		}
	}
	out, err := exec.Command(mustTool("ip"), "-o", "link", "show", "type", "bridge").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		rest, ok := strings.CutPrefix(strings.TrimSuffix(f[1], ":"), bridgePre)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, ".")
		if pid, err := strconv.Atoi(pidText); err == nil && !childproc.Alive(pid) {
			_ = ip("link", "del", bridgePre+rest)
		}
	}
}

func ip(args ...string) error {
	if out, err := exec.Command(mustTool("ip"), args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// lookTool finds an iproute2 or iptables binary on PATH or in /usr/sbin and
// /sbin, which are not on a non-root PATH.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(dir, name); isExec(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

func mustTool(name string) string {
	p, err := lookTool(name)
	if err != nil {
		return name
	}
	return p
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&0o111 != 0
}

// sanitize keeps a host name usable in a namespace's name.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, s)
}
