// Package submitter is the scheduler's HTTP API server: it accepts jobs,
// shows them, cancels and requeues them, and reports queue statistics.
//
// Why it is shaped this way: PostgreSQL is the record, so a submission is
// answered only once its INSERT has committed; Redis is only a transport,
// so the wake-up published afterwards is best effort (the coordinator polls
// PostgreSQL anyway) and never fails a request. The package is the
// composition root: New wires the store and the queue into the
// application (package app), and the JSON API (package api), the console
// (package ui), the probes and /metrics over it; Run starts and stops
// them in order.
//
// What must stay true:
//   - Every route but /healthz, /readyz and /metrics is behind
//     httpx.Authenticate and a scope (the API's route table, api/routes.go,
//     lists them; the console checks them itself).
//   - Without auth, the server listens on loopback only unless told
//     otherwise (Config.InsecureNoAuth).
//   - On shutdown /readyz fails first, the HTTP server drains, and only
//     then do the application's background parts stop.
package submitter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/api"
	"github.com/dtsched/dts/submitter/app"
	"github.com/dtsched/dts/submitter/ui"
)

// Server is a submitter: the HTTP API over a store and a queue.
type Server struct {
	cfg      Config
	logger   *slog.Logger
	store    *store.Store
	queue    *queue.Queue
	registry *prometheus.Registry
	app      *app.App
	console  *ui.Console
	handler  http.Handler

	authn    httpx.Authenticator // nil: auth is off
	limiter  *httpx.RateLimiter  // per caller; nil: no limit
	failures *httpx.RateLimiter  // failed authentications per client IP

	stopping  atomic.Bool // set once Run's context is canceled: /readyz fails
	closeOnce sync.Once
}

// New checks cfg, connects to PostgreSQL (applying migrations) and Redis,
// and builds the HTTP handler; nothing runs until Start (or Run). Close
// (or Run) stops what runs and releases the connections.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL, store.Options{Migrate: true})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	q, err := queue.OpenSentinel(ctx, cfg.RedisURL, cfg.RedisPrefix, queue.Sentinel{
		Addrs: cfg.RedisSentinelAddrs, Master: cfg.RedisSentinelMaster, Password: cfg.RedisSentinelPassword})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("open queue: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s := &Server{cfg: cfg, logger: logger.With("component", "submitter"), store: st, queue: q, registry: reg}
	if cfg.Auth.Enabled() {
		v, err := auth.NewVerifier(cfg.Auth, st, nil)
		if err != nil {
			_ = q.Close()
			st.Close()
			return nil, err
		}
		s.authn = v
		s.failures = httpx.NewRateLimiter(failedAuthRPS, failedAuthBurst, nil)
	}
	if cfg.RateLimitRPS > 0 {
		s.limiter = httpx.NewRateLimiter(cfg.RateLimitRPS, cfg.RateLimitBurst, nil)
	}
	s.app = app.New(st, q, reg, app.Config{MaxPayloadBytes: cfg.MaxPayloadBytes, MaxBacklog: cfg.MaxBacklog,
		BacklogCheckInterval: cfg.BacklogCheckInterval, RejectUnknownJobNames: cfg.RejectUnknownJobNames}, s.logger)
	if s.console, err = ui.New(s.app.Console(), ui.Config{Authn: s.authn, Failures: s.failures, Logger: s.logger, GrafanaURL: cfg.GrafanaURL, TraceURL: cfg.TraceURL,
		MaxPayloadBytes: cfg.MaxPayloadBytes}); err != nil {
		_ = q.Close()
		st.Close()
		return nil, err
	}
	s.app.OnChange(s.console.Changed)
	s.handler = s.routes(httpx.NewMetrics(reg), api.New(s.app, api.Config{MaxBodyBytes: cfg.MaxBodyBytes,
		MaxBatchBodyBytes: cfg.MaxBatchBodyBytes, MaxPayloadBytes: cfg.MaxPayloadBytes, MaxConcurrentRequests: cfg.MaxConcurrentRequests,
		MaxInflightBodyBytes: cfg.MaxInflightBodyBytes, Authn: s.authn, Failures: s.failures, Limiter: s.limiter}))
	return s, nil
}

// Start starts the application's background parts (app.App.Start). Run
// calls it; a caller that serves Handler itself calls it first. Close
// stops them.
func (s *Server) Start(ctx context.Context) error { return s.app.Start(ctx) }

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry returns the registry /metrics serves.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Run serves the API on ln until ctx is canceled, then fails /readyz, shuts
// the HTTP server down gracefully (within Config.ShutdownTimeout) and closes
// the connections. It returns nil after a clean shutdown.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	defer s.Close()
	addr := ln.Addr().String()
	if err := auth.CheckListen(addr, s.cfg.Auth.Enabled(), s.cfg.InsecureNoAuth); err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	switch {
	case s.cfg.Auth.Enabled():
	case auth.IsLoopbackAddr(addr):
		s.logger.WarnContext(ctx, auth.LoopbackWarning, "addr", addr)
	default:
		s.logger.WarnContext(ctx, "auth is off and the API is reachable beyond loopback (--insecure-no-auth): anyone who can reach it controls every job", "addr", addr)
	}
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	srv.RegisterOnShutdown(s.console.Close) // ends the console's event streams, which Shutdown would wait for
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	s.console.Warm()
	s.logger.InfoContext(ctx, "submitter listening", "addr", ln.Addr().String())

	select {
	case err := <-served:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	s.stopping.Store(true)
	s.logger.InfoContext(ctx, "submitter shutting down", "timeout", s.cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		_ = srv.Close() // cut off what is still running
		return fmt.Errorf("shut down http: %w", err)
	}
	s.logger.InfoContext(ctx, "submitter stopped")
	return nil
}

// Close releases the PostgreSQL and Redis connections. It is idempotent;
// Run calls it on return.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.stopping.Store(true)
		s.console.Close()
		s.app.Stop()
		_ = s.queue.Close() // only fails if already closed
		s.store.Close()
	})
}

// Failed authentications allowed per client IP: a burst of 20, then one a
// second. Enough for a misconfigured client to see its error; too few to
// guess anything.
const (
	failedAuthRPS   = 1
	failedAuthBurst = 20
)

// readyTimeout bounds the dependency checks of /readyz.
const readyTimeout = 2 * time.Second

// readyz handles GET /readyz: 200 when PostgreSQL and Redis answer within
// readyTimeout and the server is not shutting down.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	if s.stopping.Load() {
		return httpx.Errorf(http.StatusServiceUnavailable, wire.CodeNotReady, "shutting down")
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if failed := s.app.Ready(ctx); len(failed) > 0 {
		return httpx.Errorf(http.StatusServiceUnavailable, wire.CodeNotReady, "not reachable: %s", strings.Join(failed, ", "))
	}
	httpx.WriteJSON(w, http.StatusOK, wire.StatusResponse{Status: "ok"})
	return nil
}

// routes builds the HTTP handler: the probes and /metrics, open to all;
// the console (package ui), mounted at Config.UIBasePath, which logs users
// in with a cookie holding the same tokens and checks the same scopes
// itself; and the JSON API (package api), behind authentication.
func (s *Server) routes(m *httpx.Metrics, h *api.API) http.Handler {
	r := httpx.NewRouter(s.logger, m)
	r.Get("/healthz", httpx.Healthz)
	r.Get("/health", httpx.Healthz) // the originals' name (api/compat.go)
	r.Get("/readyz", httpx.Handler(s.readyz))
	r.Method(http.MethodGet, "/metrics", httpx.MetricsHandler(s.registry, s.logger))
	r.With(httpx.LimitConcurrency(s.cfg.MaxConcurrentRequests)).Mount(s.cfg.UIBasePath, s.console) // the console: its own login and scopes
	h.Register(r)
	return r
}
