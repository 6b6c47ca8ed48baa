package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/startstop/startstoptest"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// waitLimit bounds every wait of these tests for something that should
// happen promptly; reaching it fails the test.
const waitLimit = 10 * time.Second

// newTestWorker makes a worker on url under prefix. Zero fields of cfg get
// test values: a short heartbeat interval and a grace period no test reaches
// unless it means to.
func newTestWorker(t *testing.T, url, prefix string, cfg Config) *Worker {
	t.Helper()
	cfg.RedisURL, cfg.RedisPrefix = url, prefix
	if cfg.ID == "" {
		cfg.ID = "w1"
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 50 * time.Millisecond
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = waitLimit
	}
	w, err := New(t.Context(), cfg, slog.New(slog.NewTextHandler(testOutput(t), &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("new worker: %v", err)
	}
	return w
}

// testOutput is t.Output until the test's cleanup ends, then nothing: a
// handler a failed test left blocked may log after that.
func testOutput(t *testing.T) io.Writer {
	o := &cutWriter{w: t.Output()}
	t.Cleanup(func() { o.mu.Lock(); o.w = nil; o.mu.Unlock() }) // first registered: runs last
	return o
}

type cutWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (o *cutWriter) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.w == nil {
		return len(p), nil
	}
	return o.w.Write(p)
}

// running is a worker's Run in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error // receives Run's result
}

// run starts w.Run. The test's cleanup stops it if the test has not.
func run(t *testing.T, w *Worker) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(2 * waitLimit):
			t.Error("Run did not return at the end of the test")
		}
	})
	return r
}

// stop cancels Run's context and waits for Run to return nil.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(2 * waitLimit):
		t.Fatal("Run did not return after its context ended")
	}
}

// coordinator plays the coordinator's part over Redis: it delivers jobs,
// sends cancels, reads results and heartbeats.
type coordinator struct {
	t      *testing.T
	q      *queue.Queue
	worker string
	hbLast string // heartbeat stream id read up to
	codec  int    // what it speaks (wire.CodecBatch; lower: as older coordinators)
}

func newCoordinator(t *testing.T, url, prefix, workerID string) *coordinator {
	t.Helper()
	q, err := queue.Open(t.Context(), url, prefix)
	if err != nil {
		t.Fatalf("open queue: %v", err)
	}
	t.Cleanup(func() { _ = q.Close() })
	if err := q.EnsureResultsGroup(t.Context()); err != nil {
		t.Fatal(err)
	}
	return &coordinator{t: t, q: q, worker: workerID, hbLast: "0-0", codec: wire.CodecBatch}
}

func delivery(jobID, token int64, name string, attempt int) wire.Delivery {
	return wire.Delivery{JobID: jobID, Name: name, Queue: "default", Payload: json.RawMessage(`{}`), Attempt: attempt,
		MaxRetries: 3, LeaseToken: token, CreatedAt: time.Now()}
}

// deliver pushes ds, in order, onto the worker's list in one Deliver.
func (c *coordinator) deliver(ds ...wire.Delivery) {
	c.t.Helper()
	out := map[string]queue.Outbox{c.worker: {Deliveries: ds, Codec: c.codec}}
	if err := c.q.Deliver(c.t.Context(), out); err != nil {
		c.t.Fatal(err)
	}
}

func (c *coordinator) cancel(jobID, token int64) {
	c.t.Helper()
	err := c.q.SendControl(c.t.Context(), c.worker, wire.Control{Op: wire.OpCancel, JobID: jobID, LeaseToken: token})
	if err != nil {
		c.t.Fatal(err)
	}
}

// results reads n results from the stream, failing the test if they do not
// arrive within waitLimit.
func (c *coordinator) results(n int) []wire.Result {
	c.t.Helper()
	var out []wire.Result
	testwait.NoError(c.t, waitLimit, fmt.Sprintf("%d results", n), func() error {
		out = append(out, c.readResults(100*time.Millisecond)...)
		if len(out) < n {
			return fmt.Errorf("got %d results: %+v", len(out), out)
		}
		return nil
	})
	if len(out) > n {
		c.t.Fatalf("got %d results, want %d: %+v", len(out), n, out)
	}
	return out
}

// rawResults waits until the results stream holds n entries and returns
// them as Redis has them.
func (c *coordinator) rawResults(n int) []redis.XMessage {
	c.t.Helper()
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		c.t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	var raw []redis.XMessage
	testwait.NoError(c.t, waitLimit, fmt.Sprintf("%d entries on the results stream", n), func() error {
		var err error
		if raw, err = rdb.XRange(c.t.Context(), c.q.Keys().Results(), "-", "+").Result(); err != nil {
			c.t.Fatal(err)
		}
		if len(raw) < n {
			return fmt.Errorf("it holds %d", len(raw))
		}
		return nil
	})
	return raw
}

// readResults reads the results there are, waiting up to block for one.
func (c *coordinator) readResults(block time.Duration) []wire.Result {
	c.t.Helper()
	rs, bad, err := c.q.ReadResults(c.t.Context(), false, 100, block)
	if err != nil {
		c.t.Fatal(err)
	}
	if len(bad) > 0 {
		c.t.Fatalf("undecodable results: %v", bad)
	}
	out := make([]wire.Result, len(rs))
	ids := make([]string, len(rs))
	for i, r := range rs {
		out[i], ids[i] = r.Result, r.ID
	}
	if err := c.q.AckResults(c.t.Context(), ids); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// heartbeat reads the heartbeat stream on from the last one read until one
// satisfies ok, and returns it.
func (c *coordinator) heartbeat(what string, ok func(wire.Heartbeat) bool) wire.Heartbeat {
	c.t.Helper()
	var found wire.Heartbeat
	testwait.For(c.t, waitLimit, "a heartbeat "+what, func() bool {
		r, err := c.q.ReadHeartbeats(c.t.Context(), c.hbLast, 100, 100*time.Millisecond)
		if err != nil {
			c.t.Fatal(err)
		}
		c.hbLast = r.Last
		for _, h := range r.Heartbeats {
			if h.Heartbeat.WorkerID == c.worker && ok(h.Heartbeat) {
				found = h.Heartbeat
				return true
			}
		}
		return false
	})
	return found
}

// skipHeartbeats makes heartbeat read only heartbeats sent from now on.
func (c *coordinator) skipHeartbeats() {
	c.t.Helper()
	last, err := c.q.LastHeartbeatID(c.t.Context())
	if err != nil {
		c.t.Fatal(err)
	}
	c.hbLast = last
}

func names(hb wire.Heartbeat, jobID, token int64) bool {
	_, ok := inFlight(hb, jobID, token)
	return ok
}

// inFlight returns what hb says of the lease.
func inFlight(hb wire.Heartbeat, jobID, token int64) (wire.InFlight, bool) {
	i := slices.IndexFunc(hb.InFlight, func(f wire.InFlight) bool { return f.JobID == jobID && f.LeaseToken == token })
	if i < 0 {
		return wire.InFlight{}, false
	}
	return hb.InFlight[i], true
}

// receive waits for a value on ch, failing the test after waitLimit.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("%s: nothing within %s", what, waitLimit)
		var zero T
		return zero
	}
}

// gate is a channel a handler waits on; the test opens it, or its cleanup
// does, so that no handler outlives its test.
func gate(t *testing.T) (ch chan struct{}, open func()) {
	ch = make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(open)
	return ch, open
}

func byToken(rs []wire.Result) map[int64]wire.Result {
	m := map[int64]wire.Result{}
	for _, r := range rs {
		m[r.LeaseToken] = r
	}
	return m
}

// TestCodecs: the worker says in its heartbeats that it reads the binary
// codec and sends result batches, and it works with a coordinator that
// delivers in JSON, the binary codec, or the binary codec of a leader that
// reads batches: its results come back in what that coordinator reads.
func TestCodecs(t *testing.T) {
	t.Parallel()
	for _, codec := range []int{wire.CodecJSON, wire.CodecBinary, wire.CodecBatch, wire.CodecLogs} {
		t.Run(fmt.Sprint("codec=", codec), func(t *testing.T) {
			prefix := redistest.Prefix(t)
			w := newTestWorker(t, redistest.URL(), prefix, Config{})
			w.Handle("job", func(_ context.Context, j *Job) (any, error) {
				return map[string]string{"id": j.ID}, nil
			})
			c := newCoordinator(t, redistest.URL(), prefix, w.ID())
			c.codec = codec
			r := run(t, w)
			if hb := c.heartbeat("first", func(wire.Heartbeat) bool { return true }); hb.Codec != wire.CodecTrace {
				t.Errorf("heartbeat codec = %d, want %d", hb.Codec, wire.CodecTrace)
			}
			c.deliver(delivery(7, 70, "job", 1))
			raw := c.rawResults(1)
			field := map[int]string{wire.CodecJSON: "r", wire.CodecBinary: "r", wire.CodecBatch: "b", wire.CodecLogs: "b"}[codec]
			if v, ok := raw[0].Values[field].(string); !ok || (codec != wire.CodecJSON) != wire.IsBinary([]byte(v)) {
				t.Errorf("result entry %v; want field %q, binary %v", raw[0].Values, field, codec != wire.CodecJSON)
			}
			res := c.results(1)[0]
			if res.JobID != 7 || res.LeaseToken != 70 || res.Outcome != wire.OutcomeCompleted || string(res.Result) != `{"id":"7"}` {
				t.Fatalf("result = %+v, want job 7 completed with {\"id\":\"7\"}", res)
			}
			r.stop(t)
		})
	}
}

func TestCancelBeforeStart(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	w := newTestWorker(t, redistest.URL(), prefix, Config{})
	ran := make(chan int64, 10)
	w.Handle("job", func(_ context.Context, j *Job) (any, error) {
		ran <- 1
		return nil, nil
	})
	c := newCoordinator(t, redistest.URL(), prefix, w.ID())
	// The control list is read before the job list, so the cancel arrives
	// first however the worker's reads fall.
	c.cancel(7, 70)
	c.deliver(delivery(7, 70, "job", 1))
	r := run(t, w)

	res := c.results(1)[0]
	if res.JobID != 7 || res.LeaseToken != 70 || res.Outcome != wire.OutcomeFailed || res.Reason != job.ReasonCanceled {
		t.Fatalf("result = %+v, want failed, reason canceled, for job 7 token 70", res)
	}
	r.stop(t)
	if len(ran) != 0 {
		t.Fatal("the handler ran for a lease canceled before it was delivered")
	}
}

func TestDrain(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	w := newTestWorker(t, redistest.URL(), prefix, Config{})
	started := make(chan int64, 10)
	release, open := gate(t)
	w.Handle("slow", func(_ context.Context, j *Job) (any, error) {
		started <- 1
		<-release
		return "done", nil
	})
	otherRan := make(chan int64, 10)
	w.Handle("other", func(_ context.Context, j *Job) (any, error) {
		otherRan <- 1
		return nil, nil
	})
	c := newCoordinator(t, redistest.URL(), prefix, w.ID())
	r := run(t, w)
	c.deliver(delivery(1, 10, "slow", 1))
	receive(t, started, "start of job 1")

	r.cancel()
	c.heartbeat("saying draining", func(hb wire.Heartbeat) bool { return hb.Draining })
	// Delivered after the worker stopped taking jobs (the leader had not
	// seen it draining yet): handed back unrun.
	c.deliver(delivery(2, 20, "other", 1), delivery(3, 30, "other", 1))
	open()
	if err := receive(t, r.done, "Run's return"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r.done <- nil

	got := byToken(c.results(3))
	if res := got[10]; res.Outcome != wire.OutcomeCompleted || string(res.Result) != `"done"` {
		t.Errorf("running job: %+v, want completed within the grace period", res)
	}
	for _, token := range []int64{20, 30} {
		if res := got[token]; res.Outcome != wire.OutcomeReleased || res.Reason != "shutdown" {
			t.Errorf("undelivered job (token %d): %+v, want released, reason shutdown", token, res)
		}
	}
	if len(otherRan) != 0 {
		t.Error("a job delivered during the drain ran")
	}
	c.heartbeat("saying stopped", func(hb wire.Heartbeat) bool { return hb.Stopped })
}

// TestPrefetch: with Concurrency 1 and Prefetch 2 the worker takes three
// jobs but runs one at a time; the waiting ones are named in heartbeats (so
// their leases are extended), a cancel ends a waiting one unrun, its time
// limit starts with its handler, and at shutdown the waiting ones go back
// unrun while the running one finishes.
func TestPrefetch(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	w := newTestWorker(t, redistest.URL(), prefix, Config{Concurrency: 1, Prefetch: 2})
	started := make(chan string, 10)
	release, open := gate(t)
	var running, most atomic.Int32
	w.Handle("job", func(ctx context.Context, j *Job) (any, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		started <- j.ID
		select {
		case <-release:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return "done", nil
	})
	c := newCoordinator(t, redistest.URL(), prefix, w.ID())
	r := run(t, w)
	if hb := c.heartbeat("first", func(wire.Heartbeat) bool { return true }); hb.Prefetch != 2 || hb.Concurrency != 1 {
		t.Fatalf("heartbeat says concurrency %d, prefetch %d; want 1 and 2", hb.Concurrency, hb.Prefetch)
	}
	// Job 2 has a 1 s time limit; it waits longer than that for its slot.
	j2 := delivery(2, 20, "job", 1)
	j2.TimeoutSeconds = 1
	c.deliver(delivery(1, 10, "job", 1), j2, delivery(3, 30, "job", 1))
	if id := receive(t, started, "first start"); id != "1" {
		t.Fatalf("job %s started first, want 1", id)
	}
	hb := c.heartbeat("naming all three", func(hb wire.Heartbeat) bool { return names(hb, 1, 10) && names(hb, 2, 20) && names(hb, 3, 30) })
	// The running one says when its handler started (its time limit counts
	// from then), the waiting ones that theirs have not.
	if f, _ := inFlight(hb, 1, 10); !f.Started || f.Waiting || f.RunMillis < 0 || f.RunMillis > waitLimit.Milliseconds() {
		t.Errorf("running job in the heartbeat: %+v, want started a moment ago", f)
	}
	for _, id := range []int64{2, 3} {
		if f, _ := inFlight(hb, id, id*10); !f.Waiting || f.Started {
			t.Errorf("waiting job in the heartbeat: %+v, want waiting", f)
		}
	}
	c.cancel(3, 30)
	if res := c.results(1)[0]; res.LeaseToken != 30 || res.Outcome != wire.OutcomeFailed || res.Reason != job.ReasonCanceled {
		t.Fatalf("canceled waiting job: %+v, want failed, reason canceled", res)
	}
	// Job 2 waits longer than its time limit. A sleep, not a signal: the
	// limit is a deadline on the real clock, and only real time passing
	// shows one counted from the delivery instead of the handler's start.
	time.Sleep(1500 * time.Millisecond)
	open()
	if id := receive(t, started, "second start"); id != "2" {
		t.Fatalf("job %s started second, want 2", id)
	}
	got := byToken(c.results(2))
	for _, token := range []int64{10, 20} {
		if res := got[token]; res.Outcome != wire.OutcomeCompleted {
			t.Errorf("job with token %d: %+v, want completed (a time limit counts from the start)", token, res)
		}
	}
	if m := most.Load(); m != 1 {
		t.Errorf("%d handlers ran at once, want at most 1", m)
	}

	// Shutdown: job 4 runs (its gate is open, it finishes), 5 and 6 wait
	// and go back unrun.
	hold, letGo := gate(t)
	w2 := newTestWorker(t, redistest.URL(), prefix, Config{ID: "w2", Concurrency: 1, Prefetch: 2})
	ran := make(chan int64, 10)
	w2.Handle("job", func(ctx context.Context, j *Job) (any, error) {
		ran <- 1
		<-hold
		return nil, nil
	})
	c2 := newCoordinator(t, redistest.URL(), prefix, "w2")
	r2 := run(t, w2)
	c2.deliver(delivery(4, 40, "job", 1), delivery(5, 50, "job", 1), delivery(6, 60, "job", 1))
	receive(t, ran, "start of job 4")
	r2.cancel()
	c2.heartbeat("saying draining", func(hb wire.Heartbeat) bool { return hb.Draining })
	letGo()
	got = byToken(c2.results(3))
	if res := got[40]; res.Outcome != wire.OutcomeCompleted {
		t.Errorf("running job 4: %+v, want completed", res)
	}
	for _, token := range []int64{50, 60} {
		if res := got[token]; res.Outcome != wire.OutcomeReleased || res.Reason != "shutdown" {
			t.Errorf("waiting job with token %d: %+v, want released, reason shutdown", token, res)
		}
	}
	if len(ran) != 0 {
		t.Errorf("%d waiting jobs ran during the shutdown", len(ran))
	}
	r.stop(t)
}

func TestSendRetries(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t) // stopped and restarted: a server of its own
	w := newTestWorker(t, srv.URL(), "", Config{})
	sendFailed := make(chan struct{})
	resume, openResume := gate(t)
	var once sync.Once
	w.sendFailed = func() { // hold the sender after its first failure
		once.Do(func() { close(sendFailed); <-resume })
	}
	started := make(chan int64, 10)
	release, openRelease := gate(t)
	w.Handle("job", func(_ context.Context, j *Job) (any, error) {
		started <- 1
		<-release
		return "ok", nil
	})
	c := newCoordinator(t, srv.URL(), "", w.ID())
	r := run(t, w)
	c.deliver(delivery(5, 50, "job", 1))
	receive(t, started, "start of the job")

	srv.Stop()
	openRelease()
	receive(t, sendFailed, "a failed send of the result")
	srv.Restart(t) // empty: a new heartbeat stream
	c.hbLast = "0-0"
	c.heartbeat("naming the job whose result is unsent", func(hb wire.Heartbeat) bool { return names(hb, 5, 50) })

	openResume()
	if res := c.results(1)[0]; res.LeaseToken != 50 || res.Outcome != wire.OutcomeCompleted {
		t.Fatalf("result = %+v, want completed for token 50", res)
	}
	c.heartbeat("no longer naming the job", func(hb wire.Heartbeat) bool { return !names(hb, 5, 50) })
	r.stop(t)
	if rs := c.readResults(0); len(rs) != 0 {
		t.Fatalf("results after the first: %+v, want the result sent once", rs)
	}
}

// A job leased again while its old attempt still runs here (the old lease
// ran out): the new lease runs, the old attempt is canceled, and heartbeats
// name only the new lease.
func TestNewLeaseSupersedesRunningAttempt(t *testing.T) {
	t.Parallel()
	// Tokens are random: a new lease's may be smaller than the old one's.
	// The newer lease is the one delivered later (the list is FIFO).
	t.Run("larger token", func(t *testing.T) { t.Parallel(); testNewLeaseSupersedes(t, 90, 91) })
	t.Run("smaller token", func(t *testing.T) { t.Parallel(); testNewLeaseSupersedes(t, 91, 90) })
}

func testNewLeaseSupersedes(t *testing.T, oldTok, newTok int64) {
	prefix := redistest.Prefix(t)
	w := newTestWorker(t, redistest.URL(), prefix, Config{})
	started := make(chan int, 10) // attempt numbers
	oldCanceled := make(chan error, 1)
	releaseOld, openOld := gate(t)
	releaseNew, openNew := gate(t)
	w.Handle("job", func(ctx context.Context, j *Job) (any, error) {
		started <- j.Attempt
		if j.Attempt == 1 {
			<-ctx.Done()
			oldCanceled <- context.Cause(ctx)
			<-releaseOld // still running after its cancel
			return nil, ctx.Err()
		}
		<-releaseNew
		return "new", nil
	})
	c := newCoordinator(t, redistest.URL(), prefix, w.ID())
	r := run(t, w)
	c.deliver(delivery(9, oldTok, "job", 1))
	if a := receive(t, started, "start of the first lease"); a != 1 {
		t.Fatalf("started attempt %d, want 1", a)
	}
	c.deliver(delivery(9, newTok, "job", 2))
	if a := receive(t, started, "start of the new lease"); a != 2 {
		t.Fatalf("started attempt %d, want 2", a)
	}
	receive(t, oldCanceled, "cancel of the old attempt")
	hb := c.heartbeat("naming the new lease", func(hb wire.Heartbeat) bool { return names(hb, 9, newTok) })
	if names(hb, 9, oldTok) {
		t.Errorf("heartbeat in_flight %+v names the superseded lease %d", hb.InFlight, oldTok)
	}

	openOld()
	if res := c.results(1)[0]; res.LeaseToken != oldTok || res.Outcome == wire.OutcomeCompleted {
		t.Errorf("old attempt's result = %+v, want token %d not completed", res, oldTok)
	}
	c.skipHeartbeats()
	hb = c.heartbeat("naming the new lease", func(hb wire.Heartbeat) bool { return names(hb, 9, newTok) })
	if names(hb, 9, oldTok) {
		t.Errorf("heartbeat in_flight %+v names the superseded lease %d", hb.InFlight, oldTok)
	}
	openNew()
	if res := c.results(1)[0]; res.LeaseToken != newTok || res.Outcome != wire.OutcomeCompleted {
		t.Errorf("new attempt's result = %+v, want completed for token %d", res, newTok)
	}
	r.stop(t)
}

// The same lease delivered twice runs once, whether the second copy comes
// in the same read or after the first has finished and been reported.
func TestDuplicateDeliveryRunsOnce(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	w := newTestWorker(t, redistest.URL(), prefix, Config{})
	ran := make(chan int64, 10)
	w.Handle("job", func(_ context.Context, j *Job) (any, error) {
		id, _ := json.Number(j.ID).Int64()
		ran <- id
		return nil, nil
	})
	c := newCoordinator(t, redistest.URL(), prefix, w.ID())
	r := run(t, w)
	d := delivery(4, 40, "job", 1)
	c.deliver(d, d)
	c.results(1)
	// Again after the result is on the stream, then a marker behind it
	// (the list is FIFO): once the marker's result is in, the copy was read.
	c.deliver(d, delivery(5, 50, "job", 1))
	if res := c.results(1)[0]; res.JobID != 5 {
		t.Fatalf("result = %+v, want only the marker's (job 5)", res)
	}
	r.stop(t)
	if rs := c.readResults(0); len(rs) != 0 {
		t.Fatalf("more results: %+v", rs)
	}
	close(ran)
	var runs []int64
	for id := range ran {
		runs = append(runs, id)
	}
	if slices.Compare(runs, []int64{4, 5}) != 0 {
		t.Fatalf("handler ran for jobs %v, want [4 5]", runs)
	}
}

// With Redis gone, a worker told to stop still returns within its grace
// period (and a small bound): the results it could not send are left for
// the leader to recover by their leases.
func TestShutdownWithRedisGone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const grace = time.Second
	w := newTestWorker(t, srv.URL(), "", Config{ShutdownGrace: grace})
	started := make(chan int64, 10)
	release, open := gate(t)
	w.Handle("job", func(_ context.Context, j *Job) (any, error) {
		started <- 1
		<-release
		return "ok", nil
	})
	c := newCoordinator(t, srv.URL(), "", w.ID())
	r := run(t, w)
	c.deliver(delivery(3, 30, "job", 1))
	receive(t, started, "start of the job")

	srv.Stop()
	begin := time.Now()
	r.cancel()
	open() // it finishes, but its result cannot be sent
	// At most flushMin for results after the last attempt and stopTimeout
	// for the final heartbeat, then some slack.
	const bound = flushMin + stopTimeout + 2*time.Second
	select {
	case err := <-r.done:
		r.done <- err
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		t.Logf("Run returned %s after its context ended", time.Since(begin).Round(time.Millisecond))
	case <-time.After(grace + bound):
		t.Fatalf("Run did not return within the grace period (%s) + %s with Redis gone", grace, bound)
	}
}

// A nil logger is fine: the worker logs nowhere.
func TestNilLogger(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	w, err := New(t.Context(), Config{ID: "w1", RedisURL: redistest.URL(), RedisPrefix: prefix,
		HeartbeatInterval: 50 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("job", func(context.Context, *Job) (any, error) { panic("logged nowhere") })
	c := newCoordinator(t, redistest.URL(), prefix, w.ID())
	r := run(t, w)
	c.deliver(delivery(1, 10, "job", 1))
	if res := c.results(1)[0]; res.Outcome != wire.OutcomeFailed {
		t.Fatalf("result = %+v, want failed (the handler panicked)", res)
	}
	r.stop(t)
}

// The heartbeat loop and the result sender keep the lifecycle's promises
// under concurrent starts and stops.
func TestWorkerServicesStartStop(t *testing.T) {
	w := newTestWorker(t, redistest.URL(), redistest.Prefix(t), Config{})
	t.Run("heartbeats", func(t *testing.T) { startstoptest.Stress(t, w.heartbeats) })
	t.Run("sender", func(t *testing.T) { startstoptest.Stress(t, w.sender) })
}
