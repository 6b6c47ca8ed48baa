package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/retry"
	"github.com/dtsched/dts/internal/wire"
)

// Config configures a Worker. Zero fields take the defaults in their comments.
type Config struct {
	// ID names the worker; it must be unique in the fleet. Default hostname-pid.
	ID string
	// RedisURL is the Redis URL (redis:// or rediss://). Required.
	RedisURL string
	// RedisPrefix namespaces every Redis key; it must match the coordinator's. Default "".
	RedisPrefix string
	// Concurrency is how many jobs run at once. Default 8.
	Concurrency int
	// HeartbeatInterval is how often the worker heartbeats; it must match
	// the coordinator's setting. Default 1s.
	HeartbeatInterval time.Duration
	// ShutdownGrace is how long in-flight jobs may finish after Run's
	// context ends before they are canceled and handed back. Default 30s.
	ShutdownGrace time.Duration
	// Credential is sent with every heartbeat for the coordinator to check. Default none.
	Credential string
}

func (c Config) withDefaults() Config {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.RedisURL == "":
		return errors.New("config: RedisURL is required")
	case len(c.ID) > 200:
		return errors.New("config: ID is longer than 200 characters")
	case c.Concurrency > 100_000:
		return errors.New("config: Concurrency is above 100000")
	}
	return nil
}

// Causes of an attempt's context being canceled.
var (
	errShutdown = errors.New("worker shutting down")
	errCanceled = errors.New("job canceled")
	errTimeout  = errors.New("job timed out")
	// A newer lease of the job arrived: the old lease has ended.
	errSuperseded = errors.New("a newer lease of this job arrived")
)

// Time limits of Redis calls, and of the drain beyond the grace period.
const (
	redisTimeout = 5 * time.Second // one heartbeat, one batch of results
	cancelWait   = 5 * time.Second // for handlers to return once the grace period has ended
	flushMin     = time.Second     // the least time results get after the last attempt ended
	stopTimeout  = time.Second     // the final heartbeat, saying stopped
)

// remembered bounds the lease tokens a worker remembers beyond those it
// holds: tokens delivered lately and tokens canceled before delivery.
const remembered = 10_000

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

	// Attempts are keyed by lease token, not job id: a job can be leased
	// again while its old attempt still runs here (the old lease ran out).
	mu       sync.Mutex
	running  map[int64]*attempt // lease token → the attempt running it
	unsent   map[int64]int64    // lease token → job id, of results not yet on the stream
	toSend   []wire.Result      // results the sender has not taken yet (all in unsent)
	newest   map[int64]int64    // job id → its newest lease here, while running or unsent: what heartbeats name
	seen     tokenSet           // lease tokens delivered lately: a second delivery of one is dropped
	canceled map[int64]int64    // lease token → job id, canceled before its delivery arrived

	sendFailed func() // test hook: called after each failed send of results
}

type attempt struct {
	jobID  int64
	cancel context.CancelCauseFunc
}

// tokenSet holds the last n lease tokens added.
type tokenSet struct {
	has  map[int64]bool
	ring []int64
	next int
}

func newTokenSet(n int) tokenSet {
	return tokenSet{has: make(map[int64]bool, n), ring: make([]int64, 0, n)}
}

func (s *tokenSet) add(token int64) {
	if len(s.ring) < cap(s.ring) {
		s.ring = append(s.ring, token)
	} else {
		delete(s.has, s.ring[s.next])
		s.ring[s.next] = token
		s.next = (s.next + 1) % len(s.ring)
	}
	s.has[token] = true
}

// New connects to Redis. Register handlers with Handle before Run. A nil
// log discards the worker's log lines.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Worker, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	q, err := queue.Open(ctx, cfg.RedisURL, cfg.RedisPrefix)
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, log: log.With("component", "worker", "worker_id", cfg.ID), q: q,
		handlers: map[string]HandlerFunc{}, running: map[int64]*attempt{}, unsent: map[int64]int64{},
		newest: map[int64]int64{}, seen: newTokenSet(remembered), canceled: map[int64]int64{},
		queued: make(chan struct{}, 1)}
	w.reg = prometheus.NewRegistry()
	w.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w.metrics = newMetrics(w.reg, cfg.Concurrency, w.inFlightCount)
	return w, nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Handle registers h for jobs named name. The name "*" registers a handler
// for every name without one of its own. Call before Run.
func (w *Worker) Handle(name string, h HandlerFunc) { w.handlers[name] = h }

// Handler serves /healthz and /metrics.
func (w *Worker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(map[string]any{"status": "ok", "worker_id": w.cfg.ID,
			"draining": w.draining.Load(), "in_flight": w.inFlightCount(), "concurrency": w.cfg.Concurrency})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(w.reg, promhttp.HandlerOpts{}))
	return mux
}

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
		w.log.Info("worker listening", "addr", ln.Addr().String())
	}
	// Heartbeats and result sending outlive ctx: they carry the drain.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	sendCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	var bgWG sync.WaitGroup
	bgWG.Add(2)
	go func() { defer bgWG.Done(); w.heartbeatLoop(bg) }()
	sendDone := make(chan struct{})
	go func() { defer bgWG.Done(); w.sendLoop(sendCtx, sendDone) }()
	w.log.Info("worker started", "concurrency", w.cfg.Concurrency, "job_types", w.jobTypes())

	w.receiveLoop(ctx)

	// Drain, within the grace period but for the bounds below.
	graceEnd := time.Now().Add(w.cfg.ShutdownGrace)
	dctx, cancelDrain := context.WithDeadline(context.WithoutCancel(ctx), graceEnd)
	defer cancelDrain()
	w.draining.Store(true)
	w.log.Info("worker draining", "in_flight", w.inFlightCount(), "grace", w.cfg.ShutdownGrace)
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
		w.log.Warn("grace period over: canceling running jobs and handing them back", "in_flight", w.inFlightCount())
		w.cancelAll(errShutdown)
		select {
		case <-finished:
		case <-time.After(cancelWait):
			w.log.Error("handlers ignored cancellation; exiting without them")
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
	stopAbandon := context.AfterFunc(fctx, abandon)
	defer stopAbandon()
	w.releaseQueued(fctx)
	close(sendDone) // the sender flushes what is queued, then returns
	stopBG()        // and the heartbeat loop ends
	bgWG.Wait()
	if n := w.unsentCount(); n > 0 {
		w.log.Warn("results not sent before the drain ended: the leader recovers their jobs by their leases", "count", n)
	}
	hctx, cancelHB := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancelHB()
	w.heartbeat(hctx, true)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	w.log.Info("worker stopped")
	return nil
}

func (w *Worker) receiveLoop(ctx context.Context) {
	for ctx.Err() == nil {
		in, err := w.q.Receive(ctx, w.cfg.ID, w.cfg.Concurrency, time.Second)
		if err != nil {
			if ctx.Err() == nil {
				w.metrics.redisErrors.WithLabelValues("receive").Inc()
				w.log.Error("receive failed", "err", err)
				_ = retry.Sleep(ctx, 200*time.Millisecond)
			}
			continue
		}
		w.handleInbox(in, false)
	}
}

func (w *Worker) handleInbox(in queue.Inbox, release bool) {
	if in.Bad > 0 {
		w.metrics.badMessages.Add(float64(in.Bad))
	}
	for _, c := range in.Controls {
		if c.Op == wire.OpCancel {
			w.cancelJob(c.JobID, c.LeaseToken)
		}
	}
	for _, d := range in.Deliveries {
		w.accept(d, release)
	}
}

// releaseQueued hands back deliveries that arrived but were not started.
func (w *Worker) releaseQueued(ctx context.Context) {
	for {
		in, err := w.q.Receive(ctx, w.cfg.ID, 1000, 0)
		if err != nil || (len(in.Deliveries) == 0 && len(in.Controls) == 0) {
			return
		}
		w.handleInbox(in, true)
	}
}

// cancelJob cancels a running attempt, or remembers the cancel for a
// delivery not received yet (the control list is read before the job list,
// so a cancel can overtake its job). A cancel without a token names the
// job's newest lease here.
func (w *Worker) cancelJob(id, token int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if token == 0 {
		token = w.newest[id]
	}
	if a, ok := w.running[token]; ok && a.jobID == id {
		w.log.Info("canceling job on request", "job_id", id, "lease_token", token)
		a.cancel(errCanceled)
		return
	}
	if token == 0 || w.seen.has[token] {
		return // nothing of the job here, or that attempt has ended
	}
	if len(w.canceled) >= remembered { // bound it: forget the oldest guesses
		clear(w.canceled)
	}
	w.canceled[token] = id
}

func (w *Worker) cancelAll(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.running {
		a.cancel(cause)
	}
}

// accept takes one delivery: it starts it, or reports it handed back if
// release is set, or reports it failed if it was canceled before it came.
// Deliveries are keyed by lease token. The same lease delivered twice runs
// once. A newer lease of a job whose attempt still runs here cancels that
// attempt (its lease has ended; the coordinator rejects its result by token)
// and runs; an older one, arriving late, is dropped.
func (w *Worker) accept(d wire.Delivery, release bool) {
	h, ok := w.handlers[d.Name]
	label := d.Name
	if !ok {
		h, label = w.handlers["*"], "other"
	}
	w.mu.Lock()
	_, running := w.running[d.LeaseToken]
	_, unsent := w.unsent[d.LeaseToken]
	if running || unsent || w.seen.has[d.LeaseToken] {
		w.mu.Unlock()
		return // the same lease delivered twice
	}
	w.seen.add(d.LeaseToken)
	if old, ok := w.newest[d.JobID]; ok {
		if old > d.LeaseToken {
			w.mu.Unlock()
			return // a lease that ended before the one here began
		}
		if a, ok := w.running[old]; ok {
			w.log.Info("a new lease of a running job arrived: canceling the old attempt",
				"job_id", d.JobID, "lease_token", d.LeaseToken, "old_lease_token", old)
			a.cancel(errSuperseded)
		}
	}
	w.newest[d.JobID] = d.LeaseToken
	_, canceled := w.canceled[d.LeaseToken]
	delete(w.canceled, d.LeaseToken)
	if canceled || release {
		w.mu.Unlock()
		now := time.Now()
		r := wire.Result{JobID: d.JobID, LeaseToken: d.LeaseToken, WorkerID: w.cfg.ID, Attempt: d.Attempt,
			Outcome: wire.OutcomeReleased, Reason: "shutdown", StartedAt: now, FinishedAt: now}
		if canceled { // canceled before it started: it never runs
			r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonCanceled, "canceled before it started"
		}
		w.report(r, label)
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	if d.TimeoutSeconds > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, time.Duration(d.TimeoutSeconds)*time.Second, errTimeout)
		inner := cancel
		cancel = func(cause error) { inner(cause); stop() }
	}
	w.running[d.LeaseToken] = &attempt{jobID: d.JobID, cancel: cancel}
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer cancel(nil)
		r := w.execute(ctx, h, d)
		w.report(r, label)
	}()
}

// execute runs one attempt and turns its outcome into a result.
func (w *Worker) execute(ctx context.Context, h HandlerFunc, d wire.Delivery) (r wire.Result) {
	r = wire.Result{JobID: d.JobID, LeaseToken: d.LeaseToken, WorkerID: w.cfg.ID, Attempt: d.Attempt, StartedAt: time.Now()}
	// Built only when a line is written: the success path logs nothing at
	// info, and this runs once per job.
	log := func() *slog.Logger { return w.log.With("job_id", d.JobID, "attempt", d.Attempt, "name", d.Name) }
	defer func() {
		r.FinishedAt = time.Now()
		if p := recover(); p != nil {
			r.Outcome, r.Reason, r.Error, r.Result = wire.OutcomeFailed, job.ReasonError, fmt.Sprintf("handler panicked: %v", p), nil
			log().Error("handler panicked", "panic", fmt.Sprint(p))
		}
	}()
	if h == nil {
		r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonPermanent, "no handler for job type "+strconv.Quote(d.Name)
		return r
	}
	j := &Job{ID: strconv.FormatInt(d.JobID, 10), Name: d.Name, Queue: d.Queue, Payload: d.Payload, Attempt: d.Attempt,
		MaxRetries: d.MaxRetries, WorkerID: w.cfg.ID, CreatedAt: d.CreatedAt}
	if w.log.Enabled(ctx, slog.LevelDebug) {
		log().Debug("attempt started")
	}
	res, err := h(ctx, j)
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errShutdown):
		r.Outcome, r.Reason, r.Error = wire.OutcomeReleased, "shutdown", "worker shut down"
	case errors.Is(cause, errSuperseded):
		r.Outcome, r.Reason, r.Error = wire.OutcomeReleased, "superseded", errSuperseded.Error()
	case errors.Is(cause, errCanceled):
		r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonCanceled, "canceled"
	case errors.Is(cause, errTimeout):
		r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonTimeout, fmt.Sprintf("timed out after %ds", d.TimeoutSeconds)
	case err != nil:
		r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonError, err.Error()
		if IsPermanent(err) {
			r.Reason = job.ReasonPermanent
		}
	default:
		r.Outcome = wire.OutcomeCompleted
		if res != nil {
			b, err := json.Marshal(res)
			if err != nil {
				r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonPermanent, "result does not encode to JSON: "+err.Error()
			} else {
				r.Result = b
			}
		}
	}
	if r.Outcome != wire.OutcomeCompleted {
		log().Info("attempt did not succeed", "outcome", r.Outcome, "reason", r.Reason, "error", r.Error)
	}
	return r
}

// report moves an attempt from running to unsent and queues its result.
func (w *Worker) report(r wire.Result, label string) {
	w.mu.Lock()
	delete(w.running, r.LeaseToken)
	w.unsent[r.LeaseToken] = r.JobID
	w.toSend = append(w.toSend, r)
	w.mu.Unlock()
	w.metrics.finished.WithLabelValues(label, r.Outcome).Inc()
	if !r.StartedAt.IsZero() {
		w.metrics.duration.WithLabelValues(label).Observe(r.FinishedAt.Sub(r.StartedAt).Seconds())
	}
	select {
	case w.queued <- struct{}{}:
	default: // the sender has been told already
	}
}

// sendLoop writes queued results to the stream in pipelined batches,
// retrying each until Redis takes it or ctx ends. While a result is unsent
// its job stays in the heartbeat's in-flight list, so its lease is extended
// meanwhile. Once done is closed it sends what is queued and returns.
func (w *Worker) sendLoop(ctx context.Context, done <-chan struct{}) {
	for {
		w.mu.Lock()
		batch := w.toSend
		w.toSend = nil
		w.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-w.queued:
				continue
			case <-done:
				w.mu.Lock()
				batch, w.toSend = w.toSend, nil
				w.mu.Unlock()
				if len(batch) == 0 {
					return
				}
			case <-ctx.Done():
				return
			}
		}
		for len(batch) > 0 {
			n := min(len(batch), 512)
			if !w.send(ctx, batch[:n]) {
				return
			}
			batch = batch[n:]
		}
	}
}

// send writes one batch of results, retrying until Redis takes it (true)
// or ctx ends (false).
func (w *Worker) send(ctx context.Context, batch []wire.Result) bool {
	for attempt := 1; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, redisTimeout)
		err := w.q.SendResults(sctx, batch)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false
		}
		w.metrics.redisErrors.WithLabelValues("send_results").Inc()
		w.log.Error("send results failed; retrying", "count", len(batch), "err", err)
		if w.sendFailed != nil {
			w.sendFailed()
		}
		_ = retry.Sleep(ctx, min(time.Duration(attempt)*100*time.Millisecond, 2*time.Second))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range batch {
		delete(w.unsent, r.LeaseToken)
		if w.newest[r.JobID] == r.LeaseToken {
			delete(w.newest, r.JobID)
		}
	}
	return true
}

func (w *Worker) unsentCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.unsent)
}

func (w *Worker) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		w.heartbeat(ctx, false)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) heartbeat(ctx context.Context, stopped bool) {
	hb := wire.Heartbeat{WorkerID: w.cfg.ID, JobTypes: w.jobTypes(), Concurrency: w.cfg.Concurrency,
		Draining: w.draining.Load(), Stopped: stopped, Credential: w.cfg.Credential, SentAt: time.Now()}
	// Each job's newest lease only: an older attempt still running here, or
	// its unsent result, has a lease that has ended and holds no slot the
	// coordinator knows of.
	w.mu.Lock()
	for id, token := range w.newest {
		hb.InFlight = append(hb.InFlight, wire.InFlight{JobID: id, LeaseToken: token})
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	if err := w.q.SendHeartbeat(ctx, hb); err != nil {
		w.metrics.redisErrors.WithLabelValues("heartbeat").Inc()
		w.log.Warn("heartbeat failed", "err", err)
	}
}
