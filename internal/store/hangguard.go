package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// hangGuard closes every connection to a PostgreSQL server that has
// stopped answering.
//
// Why: a server that hangs (SIGSTOP, a frozen VM, a stuck host) or that a
// partition cuts off without a reset leaves its connections open, and a
// statement sent on one waits for an answer that never comes. No TCP timer
// fires for a hung process whose kernel still acknowledges what it is
// sent, and pgx frees the statement only when its context ends, while the
// coordinator's loops run on contexts that end only at shutdown. So while
// a connection has waited more than probeAfter for an answer, the guard
// asks its server whether it is alive, once per probeInterval: an
// SSLRequest, which the server answers with one byte before any
// authentication. A probe that gets no answer within timeout
// (connect_timeout), or cannot connect, judges the server hung: the guard
// closes all its connections, so their statements fail as
// ErrStoreUnavailable and their callers retry on new connections, and it
// fails new connections to it at once, so that pgx goes on to the next
// host of a multi-host DATABASE_URL, until a probe is answered again.
//
// What must stay true: only a server that answers nothing is judged hung;
// any answer counts as alive, so a slow statement on a live server is never
// cut short. A probe leaves no line in the server's log: after 'N' it
// closes, which PostgreSQL does not log; after 'S' it completes the TLS
// handshake and closes with close_notify, which it does not log either.
type hangGuard struct {
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout       time.Duration
	probeAfter    time.Duration
	probeInterval time.Duration

	mu    sync.Mutex
	hosts map[string]*hostState // by network and address as dialed

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type hostState struct {
	network, addr string
	conns         map[*guardedConn]struct{}
	probing       bool
	hung          bool
}

// errServerHung is what a connection to a server judged hung fails with.
var errServerHung = errors.New("server answers nothing: judged hung")

func newHangGuard(dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) *hangGuard {
	return &hangGuard{dial: dial, timeout: timeout, probeAfter: time.Second, probeInterval: 250 * time.Millisecond,
		hosts: map[string]*hostState{}}
}

// start runs the guard until stop.
func (g *hangGuard) start() {
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		t := time.NewTicker(g.probeInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			g.check(ctx)
		}
	}()
}

// stop ends the guard and waits for its probes.
func (g *hangGuard) stop() {
	if g.cancel != nil {
		g.cancel()
	}
	g.wg.Wait()
}

// DialContext is the pool's dial function: it refuses a server judged hung
// at once and tracks every connection it makes.
func (g *hangGuard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	key := network + " " + addr
	g.mu.Lock()
	if h := g.hosts[key]; h != nil && h.hung {
		g.mu.Unlock()
		return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("%s: %w", addr, errServerHung)}
	}
	g.mu.Unlock()
	c, err := g.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	gc := &guardedConn{Conn: c, g: g, key: key}
	g.mu.Lock()
	h := g.hosts[key]
	if h == nil {
		h = &hostState{network: network, addr: addr, conns: map[*guardedConn]struct{}{}}
		g.hosts[key] = h
	}
	h.conns[gc] = struct{}{}
	g.mu.Unlock()
	return gc, nil
}

// check starts a probe of every server judged hung, or with a connection
// that has waited more than probeAfter for an answer, that has none
// running.
func (g *hangGuard) check(ctx context.Context) {
	since := time.Now().Add(-g.probeAfter).UnixNano()
	g.mu.Lock()
	defer g.mu.Unlock()
	for key, h := range g.hosts {
		if len(h.conns) == 0 && !h.hung {
			delete(g.hosts, key)
			continue
		}
		if h.probing {
			continue
		}
		suspect := h.hung
		for c := range h.conns {
			if w := c.waitingSince.Load(); w != 0 && w < since {
				suspect = true
				break
			}
		}
		if suspect {
			h.probing = true
			g.wg.Add(1)
			go g.probe(ctx, h)
		}
	}
}

// probe asks h's server whether it is alive. An answer clears it; no
// answer judges it hung and closes its connections.
func (g *hangGuard) probe(ctx context.Context, h *hostState) {
	defer g.wg.Done()
	ok := g.answers(ctx, h.network, h.addr)
	g.mu.Lock()
	defer g.mu.Unlock()
	h.probing = false
	switch {
	case ok:
		h.hung = false
	case ctx.Err() == nil && !h.hung:
		h.hung = true
		for c := range h.conns {
			_ = c.Conn.Close()
		}
	}
}

// answers sends an SSLRequest and reports whether the server answered
// within timeout.
func (g *hangGuard) answers(ctx context.Context, network, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	c, err := g.dial(ctx, network, addr)
	if err != nil {
		return false
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	// SSLRequest: length 8, code 1234.5679.
	if _, err := c.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
		return false
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return false
	}
	if b[0] == 'S' {
		// Only liveness is asked: nothing is sent over this session.
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err == nil {
			_ = tc.Close()
		}
	}
	return true
}

// guardedConn is a pool connection the guard can close. waitingSince is
// when it began to wait for an answer (its first write since it last read
// anything), in Unix nanoseconds, or 0.
type guardedConn struct {
	net.Conn
	g            *hangGuard
	key          string
	once         sync.Once
	waitingSince atomic.Int64
}

func (c *guardedConn) Write(b []byte) (int, error) {
	if c.waitingSince.Load() == 0 {
		c.waitingSince.CompareAndSwap(0, time.Now().UnixNano())
	}
	return c.Conn.Write(b)
}

func (c *guardedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.waitingSince.Store(0)
	}
	return n, err
}

func (c *guardedConn) Close() error {
	c.once.Do(func() {
		c.g.mu.Lock()
		if h := c.g.hosts[c.key]; h != nil {
			delete(h.conns, c)
		}
		c.g.mu.Unlock()
	})
	return c.Conn.Close()
}
