package redistest_test

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/redistest"
)

// Main's goleak check, made after Cleanup, is also the check that Cleanup
// and the tests' t.Cleanup leave nothing behind: the goroutine that
// supervises a server ends once it is reaped.
func TestMain(m *testing.M) { redistest.Main(m) }

// client is the smallest Redis client that lets these tests avoid depending
// on the code under test elsewhere: one connection, RESP2, no pipelining.
type client struct {
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, redisURL string) *client {
	t.Helper()
	u, err := url.Parse(redisURL)
	if err != nil || u.Scheme != "redis" || u.Path != "/0" {
		t.Fatalf("URL %q: want redis://HOST:PORT/0 (err %v)", redisURL, err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", u.Host, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &client{conn: conn, r: bufio.NewReader(conn)}
}

// do sends a command and returns the reply: a string, nil, an int64, a
// []any, or an error for a Redis error or a broken connection.
func (c *client) do(args ...string) (any, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_ = c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	return c.read()
}

func (c *client) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, fmt.Errorf("redis: %s", line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(c.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		out := make([]any, 0, max(n, 0))
		for range n {
			v, err := c.read()
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown reply %q", line)
}

func ioReadFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (c *client) must(t *testing.T, args ...string) any {
	t.Helper()
	v, err := c.do(args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}

// Tests on the shared server get distinct prefixes and see only their keys.
func TestPrefixIsolation(t *testing.T) {
	t.Parallel()
	prefixes := make([]string, 3)
	for i := range prefixes {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			prefix := redistest.Prefix(t)
			prefixes[i] = prefix
			c := dial(t, redistest.URL())
			c.must(t, "SET", prefix+"owner", t.Name())
			c.must(t, "RPUSH", prefix+"list", "a", "b")

			keys := c.must(t, "KEYS", prefix+"*").([]any)
			if len(keys) != 2 {
				t.Errorf("KEYS %s* = %v, want exactly this test's 2 keys", prefix, keys)
			}
			if got := c.must(t, "GET", prefix+"owner"); got != t.Name() {
				t.Errorf("GET %sowner = %v, want %s", prefix, got, t.Name())
			}
		})
	}
	seen := map[string]bool{}
	for _, p := range prefixes {
		if p == "" || !strings.HasSuffix(p, ":") || seen[p] {
			t.Errorf("prefixes %q: want distinct, non-empty, ending in ':'", prefixes)
		}
		seen[p] = true
	}
}

// URL is stable and points at a live server.
func TestSharedURL(t *testing.T) {
	t.Parallel()
	redistest.Prefix(t)
	if a, b := redistest.URL(), redistest.URL(); a != b {
		t.Fatalf("URL changed: %s then %s", a, b)
	}
	if got := dial(t, redistest.URL()).must(t, "PING"); got != "PONG" {
		t.Fatalf("PING = %v", got)
	}
	// Persistence is off, so a test can never be slowed by a save.
	c := dial(t, redistest.URL())
	if got := c.must(t, "CONFIG", "GET", "appendonly").([]any); got[1] != "no" {
		t.Errorf("appendonly = %v, want no", got[1])
	}
	if got := c.must(t, "CONFIG", "GET", "save").([]any); got[1] != "" {
		t.Errorf("save = %q, want empty", got[1])
	}
}

// A dedicated server is separate from the shared one and from other
// dedicated servers, and may be flushed.
func TestStartDedicated(t *testing.T) {
	t.Parallel()
	a, b := redistest.Start(t), redistest.Start(t)
	if a.URL() == b.URL() || a.URL() == redistest.URL() {
		t.Fatalf("servers share a URL: %s %s %s", a.URL(), b.URL(), redistest.URL())
	}
	if want := "redis://" + a.Addr() + "/0"; a.URL() != want {
		t.Errorf("URL = %s, want %s", a.URL(), want)
	}
	ca, cb := dial(t, a.URL()), dial(t, b.URL())
	ca.must(t, "SET", "k", "a")
	if got := cb.must(t, "GET", "k"); got != nil {
		t.Errorf("GET k on b = %v, want nil", got)
	}
	ca.must(t, "FLUSHALL")
	if got := ca.must(t, "DBSIZE"); got != int64(0) {
		t.Errorf("DBSIZE after FLUSHALL = %v", got)
	}
}

// Restart loses every key, keeps the address, and serves again; so does
// Restart after Stop.
func TestRestart(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	addr := s.Addr()
	c := dial(t, s.URL())
	c.must(t, "SET", "k", "v")

	s.Restart(t)
	if s.Addr() != addr {
		t.Fatalf("Addr changed across Restart: %s -> %s", addr, s.Addr())
	}
	if _, err := c.do("PING"); err == nil {
		t.Errorf("old connection still works after Restart; want it dropped")
	}
	c = dial(t, s.URL())
	if got := c.must(t, "GET", "k"); got != nil {
		t.Errorf("GET k after Restart = %v, want nil (data gone)", got)
	}
	c.must(t, "SET", "k", "v2")

	s.Stop()
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Errorf("server still accepts connections after Stop")
	}
	s.Stop() // idempotent

	s.Restart(t)
	c = dial(t, s.URL())
	if got := c.must(t, "GET", "k"); got != nil {
		t.Errorf("GET k after Stop+Restart = %v, want nil", got)
	}
}

// A Sentinels fails over: once its master is killed, the sentinels name the
// replica, which has the master's data and takes writes. Both data servers
// and the sentinels require their passwords.
func TestSentinelsFailover(t *testing.T) {
	t.Parallel()
	g := redistest.StartSentinels(t)
	if addrs := g.Addrs(); len(addrs) != 3 {
		t.Fatalf("Addrs = %v, want 3 sentinels", addrs)
	}
	if addr, err := g.MasterAddr(); err != nil || addr != g.Master.Addr() {
		t.Fatalf("MasterAddr = %q, %v; want %s", addr, err, g.Master.Addr())
	}
	for _, addr := range []string{g.Master.Addr(), g.Replica.Addr(), g.Addrs()[0]} {
		if _, err := dial(t, "redis://"+addr+"/0").do("INFO"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Errorf("INFO on %s without AUTH: %v, want NOAUTH", addr, err)
		}
	}
	m := dial(t, g.URL())
	m.must(t, "AUTH", redistest.Password)
	m.must(t, "SET", "k", "v")
	if got := m.must(t, "WAIT", "1", "5000"); got != int64(1) {
		t.Fatalf("WAIT = %v, want the replica to have the write", got)
	}
	r := dial(t, "redis://"+g.Replica.Addr()+"/0")
	r.must(t, "AUTH", redistest.Password)
	if _, err := r.do("SET", "k", "w"); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("SET on the replica before the failover: %v, want READONLY", err)
	}

	killed := time.Now()
	g.Master.Stop()
	g.WaitMaster(t, g.Replica.Addr(), 20*time.Second)
	t.Logf("failover: %v from SIGKILL to the replica named master", time.Since(killed).Round(time.Millisecond))
	r = dial(t, "redis://"+g.Replica.Addr()+"/0")
	r.must(t, "AUTH", redistest.Password)
	if got := r.must(t, "GET", "k"); got != "v" {
		t.Errorf("GET k on the new master = %v, want v", got)
	}
	r.must(t, "SET", "k", "w")
}
