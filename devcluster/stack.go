package devcluster

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dtsched/dts/coordinator"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/submitter"
	"github.com/dtsched/dts/worker"
)

// Stack is a submitter, served by an httptest server, on a database and a
// Redis key prefix of its own; Run adds a coordinator and a worker.
type Stack struct {
	URL         string // the submitter's base URL, http://127.0.0.1:PORT
	DatabaseURL string
	RedisURL    string
	RedisPrefix string

	t testing.TB
}

// New starts a Stack until t ends. Each configure edits the submitter's
// Config, after the stack has set its database and Redis, before it
// starts.
func New(t testing.TB, configure ...func(*submitter.Config)) *Stack {
	t.Helper()
	s := &Stack{t: t, DatabaseURL: pgtest.NewDatabase(t), RedisURL: redistest.URL(), RedisPrefix: redistest.Prefix(t)}
	cfg := submitter.Config{DatabaseURL: s.DatabaseURL, RedisURL: s.RedisURL, RedisPrefix: s.RedisPrefix}
	for _, f := range configure {
		f(&cfg)
	}
	srv, err := submitter.New(t.Context(), cfg, Logger(t))
	if err != nil {
		t.Fatalf("submitter.New: %v", err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// Logger is the logger of the servers a Stack starts: warnings and errors,
// in t's output.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Services says what Run starts beyond the stack's defaults.
type Services struct {
	// Coordinator, if set, edits the coordinator's Config after the stack
	// has set its id (c1), database, Redis and fast intervals.
	Coordinator func(*coordinator.Config)
	// Worker, if set, edits the worker's Config after the stack has set its
	// id (w1), Redis and fast intervals.
	Worker func(*worker.Config)
	// Handlers are registered on the worker by name.
	Handlers map[string]worker.HandlerFunc
	// Register, if set, registers further handlers (a package's Register).
	Register func(*worker.Worker)
}

// Fast intervals: a test sees a worker join, a leader elected and a due
// job leased within a few hundred milliseconds.
const (
	heartbeatInterval = 100 * time.Millisecond
	electionInterval  = 100 * time.Millisecond
	pollInterval      = 50 * time.Millisecond
	shutdownGrace     = time.Second
)

// Run starts a coordinator and a worker on the stack until the test ends,
// and returns the coordinator's HTTP address (host:port). At the end both
// are stopped together and an error either returns fails the test.
func (s *Stack) Run(svc Services) string {
	t := s.t
	t.Helper()
	// Not t.Context(): it is canceled before cleanups run, and the two must
	// stop in the cleanup that waits for them.
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	cc := coordinator.Config{ID: "c1", DatabaseURL: s.DatabaseURL, RedisURL: s.RedisURL, RedisPrefix: s.RedisPrefix,
		HeartbeatInterval: heartbeatInterval, ElectionInterval: electionInterval, PollInterval: pollInterval}
	if svc.Coordinator != nil {
		svc.Coordinator(&cc)
	}
	co, err := coordinator.New(ctx, cc, Logger(t))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	wc := worker.Config{ID: "w1", RedisURL: s.RedisURL, RedisPrefix: s.RedisPrefix,
		HeartbeatInterval: heartbeatInterval, ShutdownGrace: shutdownGrace}
	if svc.Worker != nil {
		svc.Worker(&wc)
	}
	w, err := worker.New(ctx, wc, Logger(t))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	for name, h := range svc.Handlers {
		w.Handle(name, h)
	}
	if svc.Register != nil {
		svc.Register(w)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- co.Run(ctx, ln) }()
	go func() { done <- w.Run(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	})
	return ln.Addr().String()
}
