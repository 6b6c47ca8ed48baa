package netns_test

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/netns"
)

// dialOK reports whether from reaches to's listener at addr within a short
// time.
func dialOK(from *netns.Host, addr string) bool {
	c, err := from.Dial(&net.Dialer{Timeout: 300 * time.Millisecond}, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// A partition cuts exactly the link it names, both ways; heal restores it;
// a one-way partition drops one direction only; cleanup removes every
// namespace and the bridge.
func TestPartitionCutsOneLinkAndHeals(t *testing.T) {
	var nsNames []string
	var bridgeGW string
	t.Run("network", func(t *testing.T) {
		n := netns.New(t)
		a, b, c := n.AddHost("a"), n.AddHost("b"), n.AddHost("c")
		bridgeGW = n.Gateway
		for _, h := range n.Hosts() {
			nsNames = append(nsNames, h.Netns)
		}
		ln, err := b.Listen("tcp", b.IP+":0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		addr := ln.Addr().String()
		if !dialOK(a, addr) || !dialOK(c, addr) {
			t.Fatal("a or c cannot reach b before any partition")
		}
		// The test process, on the gateway, reaches b too.
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err != nil {
			t.Fatalf("gateway cannot reach b: %v", err)
		} else {
			conn.Close()
		}

		if err := n.Partition(a, b); err != nil {
			t.Fatal(err)
		}
		if dialOK(a, addr) {
			t.Fatal("a reaches b across a partition")
		}
		if !dialOK(c, addr) {
			t.Fatal("the partition of a-b cut c-b too")
		}
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err != nil {
			t.Fatalf("the partition of a-b cut the gateway: %v", err)
		} else {
			conn.Close()
		}
		if err := n.Heal(a, b); err != nil {
			t.Fatal(err)
		}
		if !dialOK(a, addr) {
			t.Fatal("a cannot reach b after heal")
		}

		// One way, over UDP: c's datagrams to a are dropped, a's reach c.
		pa, err := a.ListenPacket("udp", a.IP+":0")
		if err != nil {
			t.Fatal(err)
		}
		defer pa.Close()
		pc, err := c.ListenPacket("udp", c.IP+":0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		if err := n.PartitionOneWay(c, a); err != nil {
			t.Fatal(err)
		}
		got := func(to net.PacketConn, from net.PacketConn) bool {
			_, _ = from.WriteTo([]byte("x"), to.LocalAddr())
			_ = to.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			buf := make([]byte, 8)
			_, _, err := to.ReadFrom(buf)
			return err == nil
		}
		if got(pa, pc) {
			t.Fatal("c's datagram reached a across a one-way partition c->a")
		}
		if !got(pc, pa) {
			t.Fatal("a's datagram did not reach c: the one-way partition c->a cut a->c")
		}
		if err := n.HealAll(); err != nil {
			t.Fatal(err)
		}
		if !got(pa, pc) {
			t.Fatal("c's datagram does not reach a after HealAll")
		}
	})
	if len(nsNames) == 0 {
		return // skipped: no root, ip or iptables
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range nsNames {
		if strings.Contains(string(out), ns) {
			t.Errorf("namespace %s left after cleanup", ns)
		}
	}
	if out, _ := exec.Command("ip", "-4", "-o", "addr", "show").Output(); strings.Contains(string(out), bridgeGW+"/") {
		t.Errorf("bridge address %s left after cleanup", bridgeGW)
	}
}

// Networks made at the same instant, by this binary or another, each get a
// /24 and veth names of their own: two bridges on one subnet would route
// each other's traffic, and their hosts' veth ends would clash by name.
func TestConcurrentNetworksGetTheirOwnSubnet(t *testing.T) {
	for i := 0; i < 8; i++ {
		t.Run("net", func(t *testing.T) {
			t.Parallel()
			n := netns.New(t)
			n.AddHost("a")
			n.AddHost("b")
			out, err := exec.Command("ip", "-4", "-o", "addr", "show").Output()
			if err != nil {
				t.Fatal(err)
			}
			if c := strings.Count(string(out), " "+n.Gateway+"/24 "); c != 1 {
				t.Errorf("%d interfaces hold the gateway %s; want only this network's bridge", c, n.Gateway)
			}
		})
	}
}

// A namespace can outlive its network's cleanup while anything still holds
// it (a process or a thread inside, an open file of it), and its veth's
// host end with it. A network made after that, on the /24 just freed,
// still gets hosts: veth names are never reused.
func TestNetworkAfterALingeringNamespace(t *testing.T) {
	var held *os.File
	t.Run("first", func(t *testing.T) {
		n := netns.New(t)
		h := n.AddHost("a")
		f, err := os.Open(h.File())
		if err != nil {
			t.Fatal(err)
		}
		held = f
	})
	if held == nil {
		t.Fatal("the first network was not made")
	}
	defer held.Close()
	n := netns.New(t)
	n.AddHost("a")
	n.AddHost("b")
}
