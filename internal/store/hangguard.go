package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
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
// coordinator's loops run on contexts that end only at shutdown. So every
// probeInterval the guard asks each server that holds connections of the
// pool whether it is alive, with an SSLRequest, which the server answers
// with one byte before any authentication (and without a log line). Once
// a server has answered nothing for timeout (connect_timeout), the guard
// closes all its connections, so their statements fail as
// ErrStoreUnavailable and their callers retry on new connections, and it
// fails new connections to it at once, so that pgx goes on to the next host
// of a multi-host DATABASE_URL, until the server answers again.
//
// What must stay true: only a server that answers nothing is judged hung;
// any answer, even a refusal of TLS, counts as alive, so a slow statement
// on a live server is never cut short.
type hangGuard struct {
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout       time.Duration
	probeInterval time.Duration

	mu    sync.Mutex
	hosts map[string]*hostState // by network and address as dialed

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type hostState struct {
	network, addr string
	conns         map[*guardedConn]struct{}
	lastAnswer    time.Time
	probing       bool
	hung          bool
}

// errServerHung is what a connection to a server judged hung fails with.
var errServerHung = errors.New("server answers nothing: judged hung")

func newHangGuard(dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) *hangGuard {
	return &hangGuard{dial: dial, timeout: timeout, probeInterval: min(time.Second, timeout/2), hosts: map[string]*hostState{}}
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
		h = &hostState{network: network, addr: addr, conns: map[*guardedConn]struct{}{}, lastAnswer: time.Now()}
		g.hosts[key] = h
	}
	h.conns[gc] = struct{}{}
	g.mu.Unlock()
	return gc, nil
}

// check starts a probe of every server with connections (or judged hung)
// that has none running.
func (g *hangGuard) check(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for key, h := range g.hosts {
		if len(h.conns) == 0 && !h.hung {
			delete(g.hosts, key)
			continue
		}
		if !h.probing {
			h.probing = true
			g.wg.Add(1)
			go g.probe(ctx, h)
		}
	}
}

// probe sends an SSLRequest to h's server. An answer within timeout clears
// it; a probe that fails (times out, or cannot connect) when the server has
// answered nothing for timeout judges it hung and closes its connections.
func (g *hangGuard) probe(ctx context.Context, h *hostState) {
	defer g.wg.Done()
	ok := func() bool {
		ctx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		c, err := g.dial(ctx, h.network, h.addr)
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
		_, err = io.ReadFull(c, b[:])
		return err == nil
	}()
	g.mu.Lock()
	defer g.mu.Unlock()
	h.probing = false
	switch {
	case ok:
		h.lastAnswer = time.Now()
		h.hung = false
	case ctx.Err() == nil && !h.hung && time.Since(h.lastAnswer) >= g.timeout:
		h.hung = true
		for c := range h.conns {
			_ = c.Conn.Close()
		}
	}
}

// guardedConn is a pool connection the guard can close.
type guardedConn struct {
	net.Conn
	g    *hangGuard
	key  string
	once sync.Once
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
