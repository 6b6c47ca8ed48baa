package worker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/wire"
)

// Time limits of Redis calls, and of the drain beyond the grace period.
const (
	redisTimeout = 5 * time.Second // one heartbeat, one batch of results
	cancelWait   = 5 * time.Second // for handlers to return once the grace period has ended
	flushMin     = time.Second     // the least time results get after the last attempt ended
	stopTimeout  = time.Second     // the final heartbeat, saying stopped
)

// Worker runs handlers for jobs the coordinator leases to it.
type Worker struct {
	cfg      Config
	log      *slog.Logger
	q        *queue.Queue
	handlers map[string]HandlerFunc
	reg      *prometheus.Registry
	metrics  *metrics

	draining atomic.Bool
	wg       sync.WaitGroup // running attempts
	queued   chan struct{}  // a result was queued (capacity 1)
	slots    *slots         // Concurrency slots, granted in delivery order

	// Attempts are keyed by lease token, not job id: a job can be leased
	// again while its old attempt still runs here (the old lease ran out).
	mu       sync.Mutex
	running  map[int64]*attempt  // lease token → the attempt running it
	unsent   map[int64]time.Time // lease token → its handler's start (zero: never ran), of results not yet on the stream
	toSend   []wire.Result       // results the sender has not taken yet (all in unsent)
	newest   map[int64]int64     // job id → its newest lease here, while running or unsent: what heartbeats name
	seen     tokenSet            // lease tokens delivered lately: a second delivery of one is dropped
	canceled map[int64]int64     // lease token → job id, canceled before its delivery arrived

	// finished counts attempts ended here; prefetch is the prefetch in
	// force (Config.PrefetchMax), set by the heartbeat loop.
	finished atomic.Int64
	prefetch atomic.Int64

	heartbeats *startstop.Func // heartbeatLoop
	sender     *sender

	sendFailed func() // test hook: called after each failed send of results
}

// New connects to Redis. Register handlers with Handle before Run. A nil
// log discards the worker's log lines.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Worker, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	q, err := queue.OpenSentinel(ctx, cfg.RedisURL, cfg.RedisPrefix, queue.Sentinel{
		Addrs: cfg.RedisSentinelAddrs, Master: cfg.RedisSentinelMaster, Password: cfg.RedisSentinelPassword})
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, log: log.With("component", "worker", "worker_id", cfg.ID), q: q,
		handlers: map[string]HandlerFunc{}, running: map[int64]*attempt{}, unsent: map[int64]time.Time{},
		newest: map[int64]int64{}, seen: newTokenSet(remembered), canceled: map[int64]int64{},
		queued: make(chan struct{}, 1), slots: newSlots(cfg.Concurrency)}
	w.prefetch.Store(int64(cfg.Prefetch))
	w.reg = prometheus.NewRegistry()
	w.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w.metrics = newMetrics(w.reg, cfg.Concurrency, w.inFlightCount)
	w.heartbeats = startstop.NewFunc(w.heartbeatLoop)
	w.sender = &sender{w: w}
	return w, nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Handle registers h for jobs named name. The name "*" registers a handler
// for every name without one of its own. Call before Run.
func (w *Worker) Handle(name string, h HandlerFunc) { w.handlers[name] = h }

func (w *Worker) jobTypes() []string {
	types := make([]string, 0, len(w.handlers))
	for name := range w.handlers {
		types = append(types, name)
	}
	return types
}

func (w *Worker) inFlightCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

// Run works until ctx ends, then drains: it stops taking jobs, lets running
// ones finish for up to ShutdownGrace, cancels and hands back the rest (and
// any delivered but not started), sends their results, and says it stopped.
// Results Redis has not taken when the grace period ends (or 1 s after the
// last job ended, if later) are given up: the coordinator recovers those
// jobs by their leases. If ln is not nil it also serves Handler on it.
func (w *Worker) Run(ctx context.Context, ln net.Listener) error {
	defer w.q.Close()
	if len(w.handlers) == 0 {
		return errors.New("no handlers registered")
	}
	var srv *http.Server
	if ln != nil {
		srv = &http.Server{Handler: w.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		w.log.InfoContext(ctx, "worker listening", "addr", ln.Addr().String())
	}
	// Heartbeats and result sending outlive ctx: they carry the drain.
	_ = startstop.StartAll(context.WithoutCancel(ctx), w.heartbeats, w.sender) // neither fails to start
	defer startstop.StopAll(w.sender, w.heartbeats)
	w.log.InfoContext(ctx, "worker started", "concurrency", w.cfg.Concurrency, "job_types", w.jobTypes())

	w.receiveLoop(ctx)
	w.drain(ctx)
	hctx, cancelHB := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancelHB()
	w.heartbeat(hctx, true)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	w.log.InfoContext(hctx, "worker stopped")
	return nil
}

// drain ends Run: running jobs get the grace period to finish, then are
// canceled and handed back; prefetched ones go back unrun; results are
// sent until the grace period ends (and for at least flushMin after the
// last attempt ended); then the sender and the heartbeats stop. ctx is
// Run's, already done.
func (w *Worker) drain(ctx context.Context) {
	graceEnd := time.Now().Add(w.cfg.ShutdownGrace)
	dctx, cancelDrain := context.WithDeadline(context.WithoutCancel(ctx), graceEnd)
	defer cancelDrain()
	w.draining.Store(true)
	w.cancelWaiting(errShutdown) // prefetched jobs go back unrun, before a slot frees for them
	w.log.InfoContext(dctx, "worker draining", "in_flight", w.inFlightCount(), "grace", w.cfg.ShutdownGrace)
	finished := make(chan struct{})
	var lastEnd time.Time // when the last attempt ended; read only once finished is closed
	go func() { w.wg.Wait(); lastEnd = time.Now(); close(finished) }()
	w.heartbeat(dctx, false)
	w.releaseQueued(dctx)
	select {
	case <-finished:
	case <-dctx.Done():
	}
	select {
	case <-finished:
	default:
		w.log.WarnContext(dctx, "grace period over: canceling running jobs and handing them back", "in_flight", w.inFlightCount())
		w.cancelAll(errShutdown)
		select {
		case <-finished:
		case <-time.After(cancelWait):
			w.log.ErrorContext(dctx, "handlers ignored cancellation; exiting without them")
		}
	}
	// Results are sent until the grace period ends, and for at least
	// flushMin after the last attempt ended. Those Redis has not taken by
	// then are given up: their leases are the leader's to recover.
	ended := time.Now() // handlers that ignored cancellation are left behind
	select {
	case <-finished:
		ended = lastEnd
	default:
	}
	flushEnd := graceEnd
	if t := ended.Add(flushMin); t.After(flushEnd) {
		flushEnd = t
	}
	fctx, cancelFlush := context.WithDeadline(context.WithoutCancel(ctx), flushEnd)
	defer cancelFlush()
	w.releaseQueued(fctx)
	w.heartbeats.Stop()
	w.sender.Finish(fctx) // sends what is queued, until flushEnd
	if n := w.unsentCount(); n > 0 {
		w.log.WarnContext(fctx, "results not sent before the drain ended: the leader recovers their jobs by their leases", "count", n)
	}
}
