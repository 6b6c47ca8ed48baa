// Package submitter is the scheduler's HTTP API: it accepts jobs, shows
// them, cancels and requeues them, and reports queue statistics.
//
// Why it is shaped this way: PostgreSQL is the record, so a submission is
// answered only once its INSERT has committed; Redis is only a transport,
// so the wake-up published afterwards is best effort (the coordinator polls
// PostgreSQL anyway) and never fails a request. Every route decodes and
// validates its whole input before it touches the database, so bad input
// writes nothing; handlers return errors and httpx.Classify alone turns
// them into answers.
//
// Input rules (docs/api.md is the API reference): bodies are
// JSON whatever the Content-Type says (curl -d sends a form type); unknown
// fields are refused with 400 invalid_field, so a typo such as "max_retry"
// is reported instead of silently ignored; field names match
// case-insensitively and a repeated key keeps its last value
// (encoding/json's rules).
//
// What must stay true:
//   - A request is validated completely before any write; a batch is
//     inserted by one statement, all or nothing. Concurrent single
//     submissions may share a statement (insertBatcher); each is still
//     answered only after the commit of its row.
//   - The submitter never changes a leased job's state itself: cancel
//     records the request in PostgreSQL and asks the job's worker to stop.
//   - No metric label carries user input.
//   - Every route but /healthz, /readyz and /metrics is behind
//     httpx.Authenticate and a scope (submit, read or admin; routes()
//     lists them); every admin action writes its audit row before it acts.
//   - Without auth, the server listens on loopback only unless told
//     otherwise (Config.InsecureNoAuth).
package submitter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/ui"
)

// Server is a submitter: the HTTP API over a store and a queue.
type Server struct {
	cfg      Config
	logger   *slog.Logger
	store    *store.Store
	queue    *queue.Queue
	registry *prometheus.Registry
	metrics  *metrics
	handler  http.Handler
	tokens   *TokenAdmin
	svc      service // what the JSON handlers and the console call
	console  *ui.Console
	inserts  *insertBatcher // single submissions, coalesced
	backlog  *backlogGuard  // admission control (Config.MaxBacklog)
	names    *jobNames      // Config.RejectUnknownJobNames and the submissions' warnings
	ops      *opRunner      // background bulk operations (operations.go)

	authn    httpx.Authenticator // nil: auth is off
	limiter  *httpx.RateLimiter  // per caller; nil: no limit
	failures *httpx.RateLimiter  // failed authentications per client IP

	stopping  atomic.Bool // set once Run's context is canceled: /readyz fails
	closeOnce sync.Once

	wakeCh chan struct{} // capacity 1: a wake-up is pending
	wakeMu sync.Mutex
	// wakeNext is what the pending wake-up says (wire.Wake, merged over
	// the requests since the last one); nil once published.
	wakeNext *wire.Wake
	waker    *startstop.Func // publishes the wake-ups (runWaker)

	// services are the background parts, in the order Close stops them.
	services []startstop.Service
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
	s := &Server{
		cfg:      cfg,
		logger:   logger.With("component", "submitter"),
		store:    st,
		queue:    q,
		registry: reg,
		metrics:  newMetrics(reg),
		tokens:   &TokenAdmin{store: st},
	}
	s.svc = service{s}
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
	s.inserts = newInsertBatcher(st.JobInsert, insertFlushers, maxInsertRows, insertTimeout,
		func(n int) { s.metrics.insertRows.Observe(float64(n)) })
	s.names = newJobNames(st.WorkerJobTypes)
	s.backlog = newBacklogGuard(st.JobCountDue, cfg.MaxBacklog, cfg.BacklogCheckInterval, s.logger)
	if s.console, err = ui.New(consoleService{s.svc}, ui.Config{Authn: s.authn, Failures: s.failures, Logger: s.logger, GrafanaURL: cfg.GrafanaURL, TraceURL: cfg.TraceURL,
		MaxPayloadBytes: cfg.MaxPayloadBytes}); err != nil {
		_ = q.Close()
		st.Close()
		return nil, err
	}
	s.ops = newOpRunner(s)
	s.handler = s.routes(httpx.NewMetrics(reg))
	s.wakeCh = make(chan struct{}, 1)
	s.waker = startstop.NewFunc(s.runWaker)
	// The requests' helpers stop after the HTTP server (Run shuts it down
	// first); the waker last, so that it publishes their last wake-up.
	s.services = []startstop.Service{s.ops, s.inserts, s.backlog, s.waker}
	return s, nil
}

// Start starts the background parts: the insert batcher, the backlog
// guard, the bulk operations and the wake-ups. Run calls it; a caller that
// serves Handler itself calls it first. Close stops them.
func (s *Server) Start(ctx context.Context) error {
	// Their lifetime is the server's, until Close, not the caller's ctx.
	return startstop.StartAll(context.WithoutCancel(ctx), s.services...)
}

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
		startstop.StopAll(s.services...)
		_ = s.queue.Close() // only fails if already closed
		s.store.Close()
	})
}

// bestEffortTimeout bounds the Redis calls made after PostgreSQL has
// committed (wake-up, cancel control).
const bestEffortTimeout = time.Second

// Failed authentications allowed per client IP: a burst of 20, then one a
// second. Enough for a misconfigured client to see its error; too few to
// guess anything.
const (
	failedAuthRPS   = 1
	failedAuthBurst = 20
)

// wake asks the waker goroutine to tell the coordinator that jobs are due,
// without waiting: a submission's answer never waits for Redis. Requests
// made while a wake-up is pending share it, so a burst of submissions
// costs a few PUBLISHes, and each submission is followed by a PUBLISH that
// starts after its INSERT committed.
//
// The wake-up is limited (queue.Wake): the jobs made due may have a
// limit_key. That is what every operator action says (requeues, run now,
// a resumed queue, a changed limit): they are rare, and a limited wake-up
// that was not needed costs only the leader's limited claim, finding
// nothing, in its rounds until it next checks for limited jobs (a poll
// interval). Submissions say what they know (wakeSubmitted).
func (s *Server) wake() { s.wakeSubmitted(wire.Wake{Limited: true}) }

// wakeSubmitted is wake for submitted jobs; w says what the submission
// knows of them: whether some were created with a limit_key
// (store.JobInsertResult.Limited) and their names.
func (s *Server) wakeSubmitted(w wire.Wake) {
	if s.console != nil {
		s.console.Changed()
	}
	s.wakeMu.Lock() // before the signal: the PUBLISH that takes it reads it
	if s.wakeNext != nil {
		w = s.wakeNext.Merge(w)
	}
	s.wakeNext = &w
	s.wakeMu.Unlock()
	select {
	case s.wakeCh <- struct{}{}:
	default: // one is pending already and will start after our commit
	}
}

// runWaker publishes the wake-ups that wake requests. Best effort: a
// failure is counted and logged at debug, and the coordinator's poll picks
// the jobs up anyway.
func (s *Server) runWaker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			select {
			case <-s.wakeCh: // the last requests' wake-up, on the way out
				s.publishWake(context.WithoutCancel(ctx))
			default:
			}
			return
		case <-s.wakeCh:
			s.publishWake(ctx)
		}
	}
}

func (s *Server) publishWake(ctx context.Context) {
	s.wakeMu.Lock()
	w := s.wakeNext
	s.wakeNext = nil
	s.wakeMu.Unlock()
	if w == nil {
		return // an earlier PUBLISH took this request's wake-up
	}
	pctx, cancel := context.WithTimeout(ctx, bestEffortTimeout)
	defer cancel()
	if err := s.queue.Wake(pctx, *w); err != nil && ctx.Err() == nil {
		s.metrics.wakeErrors.Inc()
		s.metrics.countRedisError(redisOpWake)
		s.logger.DebugContext(ctx, "wake coordinator", "error", err)
	}
}
