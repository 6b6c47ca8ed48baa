package submitter_test

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter"
)

// While PostgreSQL cannot be reached, every route that needs it answers 503
// store_unavailable with Retry-After, reads included, and a submission
// refused that way leaves nothing behind.
func TestPostgresDownAnswers503(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	pg := newTCPProxy(t, dbURL)
	srv, err := submitter.New(t.Context(), submitter.Config{DatabaseURL: pg.url, RedisURL: redistest.URL(),
		RedisPrefix: redistest.Prefix(t)}, testLogger(t))
	if err != nil {
		t.Fatalf("submitter.New: %v", err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	e := newEnvFrom(t, srv, dbURL) // the test's own connections bypass the proxy
	kept := e.submit(`{"name":"before"}`)

	pg.stop() // connections refused, open ones cut
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/submit_job", `{"name":"during"}`},
		{"POST", "/submit_jobs", `[{"name":"during"},{"name":"during"}]`},
		{"GET", "/jobs/" + kept.JobID, ""},
		{"GET", "/jobs", ""},
		{"GET", "/dlq", ""},
		{"GET", "/stats", ""},
		{"POST", "/jobs/" + kept.JobID + "/cancel", ""},
	} {
		resp := e.raw(r.method, r.path, r.body)
		var body wire.ErrorResponse
		_ = json.Unmarshal(resp.body, &body)
		if resp.status != http.StatusServiceUnavailable || body.Error.Code != wire.CodeStoreUnavailable ||
			resp.header.Get("Retry-After") == "" {
			t.Errorf("%s %s with PostgreSQL down: %d Retry-After %q %s, want 503 %s with Retry-After",
				r.method, r.path, resp.status, resp.header.Get("Retry-After"), resp.body, wire.CodeStoreUnavailable)
		}
	}

	pg.start()
	e.submit(`{"name":"after"}`)
	if n := e.count(`SELECT count(*) FROM jobs WHERE name = 'during'`); n != 0 {
		t.Errorf("%d jobs from submissions refused while PostgreSQL was down", n)
	}
	if n := e.jobCount(); n != 2 {
		t.Errorf("%d jobs, want the 2 accepted", n)
	}
}

type rawResponse struct {
	status int
	header http.Header
	body   []byte
}

// raw sends a request and returns the whole answer, headers included.
func (e *env) raw(method, path, body string) rawResponse {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.http.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: b}
}

// tcpProxy stands between a client and PostgreSQL so a test can take the
// database away: stop refuses new connections and cuts the open ones, as
// a PostgreSQL that is down does; start listens again on the same address.
type tcpProxy struct {
	t      *testing.T
	target string // PostgreSQL's host:port
	addr   string // the proxy's host:port
	url    string // the database URL through the proxy

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newTCPProxy(t *testing.T, dbURL string) *tcpProxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{t: t, target: u.Host, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	u.Host = p.addr
	p.url = u.String()
	p.serve(ln)
	t.Cleanup(p.stop)
	return p
}

func (p *tcpProxy) start() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[s] = struct{}{}, struct{}{}
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			p.wg.Go(func() { pipe(s, c) })
			p.wg.Go(func() { pipe(c, s) })
		}
	})
}

// stop closes the listener and every open connection, and waits for the
// proxy's goroutines.
func (p *tcpProxy) stop() {
	p.mu.Lock()
	if p.ln != nil {
		if err := p.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			p.t.Errorf("proxy: close listener: %v", err)
		}
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	p.wg.Wait()
}
