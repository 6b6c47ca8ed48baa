package coordinator

// Queues in the dispatcher, against real PostgreSQL and Redis: which claim
// runs, pause and resume, weights, caps. Workers are simulated over the
// real Redis lists and results stream (fakeWorker), so the dispatcher and
// the result applier run exactly as in production.

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// countingStore is the real store, counting which claim the dispatcher
// calls.
type countingStore struct {
	*store.Store
	plain, byQueue atomic.Int64
}

func (s *countingStore) JobClaimBatch(ctx context.Context, p store.JobClaimParams) ([]store.Claimed, error) {
	s.plain.Add(1)
	return s.Store.JobClaimBatch(ctx, p)
}

func (s *countingStore) JobClaimGroups(ctx context.Context, p store.JobClaimGroupsParams) ([]store.Claimed, error) {
	s.plain.Add(1)
	return s.Store.JobClaimGroups(ctx, p)
}

func (s *countingStore) JobClaimQueues(ctx context.Context, p store.JobClaimQueuesParams) ([]store.Claimed, error) {
	s.byQueue.Add(1)
	return s.Store.JobClaimQueues(ctx, p)
}

func (r *rig) insertIn(queue string, priority, n int) {
	r.t.Helper()
	ps := make([]store.JobInsertParams, n)
	for i := range ps {
		ps[i] = store.JobInsertParams{Name: "x", Queue: queue, Priority: priority, Payload: json.RawMessage(`null`)}
	}
	if _, err := r.store.JobInsert(r.ctx, ps); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) count(sql string, args ...any) int {
	r.t.Helper()
	var n int
	if err := r.db.QueryRow(r.ctx, sql, args...).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// The unlimited path: with nothing paused or capped and workers that serve
// every queue, the dispatcher runs the plain claim (dts_claim_jobs) and
// never the claim by queue; a pause anywhere, or a worker with
// WORKER_QUEUES, switches to the claim by queue.
func TestDispatchPlainClaimUnlessQueuesConfigured(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := &countingStore{Store: r.store}
	d := &dispatcher{base: r.b, store: cs, queue: r.queue}
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "w", JobTypes: []string{"*"}, Concurrency: 100}, time.Now())
	round := func() {
		t.Helper()
		d.queuesAt = time.Time{} // reload the settings now, not after the poll interval
		if _, err := d.roundDelivered(r.ctx, scopeAll); err != nil {
			t.Fatal(err)
		}
	}
	r.insertIn("default", 0, 3)
	r.insertIn("reports", 0, 3)
	round()
	if cs.plain.Load() != 1 || cs.byQueue.Load() != 0 || r.count(`SELECT count(*) FROM jobs WHERE status = 'leased'`) != 6 {
		t.Fatalf("nothing configured: plain %d, by queue %d claims; want 1 and 0", cs.plain.Load(), cs.byQueue.Load())
	}
	// A queue resumed and uncapped is as good as none.
	if _, err := r.store.QueueSetPaused(r.ctx, "reports", false); err != nil {
		t.Fatal(err)
	}
	r.insertIn("default", 0, 1)
	round()
	if cs.plain.Load() != 2 || cs.byQueue.Load() != 0 {
		t.Fatalf("a row with nothing set: plain %d, by queue %d claims; want 2 and 0", cs.plain.Load(), cs.byQueue.Load())
	}
	if _, err := r.store.QueueSetPaused(r.ctx, "reports", true); err != nil {
		t.Fatal(err)
	}
	r.insertIn("reports", 0, 1)
	r.insertIn("default", 0, 1)
	round()
	if cs.plain.Load() != 2 || cs.byQueue.Load() != 1 {
		t.Fatalf("a queue paused: plain %d, by queue %d claims; want 2 and 1", cs.plain.Load(), cs.byQueue.Load())
	}
	if n := r.count(`SELECT count(*) FROM jobs WHERE queue = 'reports' AND status = 'pending'`); n != 1 {
		t.Fatalf("%d reports jobs pending; want the 1 of the paused queue", n)
	}
	if _, err := r.store.QueueSetPaused(r.ctx, "reports", false); err != nil {
		t.Fatal(err)
	}
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "w", JobTypes: []string{"*"}, Concurrency: 100,
		Queues: []wire.QueueWeight{{Name: "reports", Weight: 1}}}, time.Now())
	round()
	if cs.plain.Load() != 2 || cs.byQueue.Load() != 2 || r.count(`SELECT count(*) FROM jobs WHERE status = 'pending'`) != 0 {
		t.Fatalf("a worker with queues: plain %d, by queue %d claims; want 2 and 2, nothing pending", cs.plain.Load(), cs.byQueue.Load())
	}
}

// fakeWorker runs the worker side of the protocol over the real Redis
// lists: it takes its deliveries, runs each (run decides how long) and
// reports it completed. The registry learns of it from one heartbeat; no
// reaper runs, so it never expires.
type fakeWorker struct {
	r   *rig
	id  string
	run func(d wire.Delivery)
	mu  sync.Mutex
	got []wire.Delivery
}

func (r *rig) fakeWorker(id string, concurrency int, queues []wire.QueueWeight, run func(d wire.Delivery)) *fakeWorker {
	w := &fakeWorker{r: r, id: id, run: run}
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: id, JobTypes: []string{"*"}, Concurrency: concurrency, Queues: queues}, time.Now())
	r.b.l.wake()
	ctx, cancel := context.WithCancel(r.ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			in, err := r.queue.Receive(ctx, id, 100, time.Second)
			if err != nil {
				continue
			}
			w.mu.Lock()
			w.got = append(w.got, in.Deliveries...)
			w.mu.Unlock()
			for _, d := range in.Deliveries {
				wg.Go(func() {
					started := time.Now()
					if w.run != nil {
						w.run(d)
					}
					_ = r.queue.SendResults(context.WithoutCancel(ctx), []wire.Result{{JobID: d.JobID, LeaseToken: d.LeaseToken,
						WorkerID: id, Attempt: d.Attempt, Outcome: wire.OutcomeCompleted, Result: json.RawMessage(`1`),
						StartedAt: started, FinishedAt: time.Now()}})
				})
			}
		}
	})
	r.t.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

func (w *fakeWorker) deliveries() []wire.Delivery {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wire.Delivery(nil), w.got...)
}

func (r *rig) dispatchAndApply() {
	r.start(&dispatcher{base: r.b, store: r.store, queue: r.queue})
	r.start(r.results())
}

// Pausing a queue stops its jobs being leased while its running jobs run
// to their end; other queues go on; resuming leases the rest.
func TestDispatchPauseAndResume(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	release := make(chan struct{})
	r.fakeWorker("w", 8, nil, func(d wire.Delivery) {
		if d.Queue == "reports" {
			<-release
		}
	})
	r.insertIn("reports", 5, 4)
	r.dispatchAndApply()
	testwait.For(t, 10*time.Second, "4 reports jobs running", func() bool {
		return r.count(`SELECT count(*) FROM jobs WHERE queue = 'reports' AND status = 'leased'`) == 4
	})
	if _, err := r.store.QueueSetPaused(r.ctx, "reports", true); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the dispatcher to load the pause", func() bool { return testutil.ToFloat64(r.b.metrics.queuesConfigured) == 1 })
	// Higher priority than default and older: a claim that ignored the
	// pause would take them before the default jobs.
	r.insertIn("reports", 5, 10)
	r.insertIn("default", 0, 4)
	r.b.l.wake()
	testwait.For(t, 10*time.Second, "the default jobs to complete", func() bool {
		return r.count(`SELECT count(*) FROM jobs WHERE queue = 'default' AND status = 'completed'`) == 4
	})
	if n := r.count(`SELECT count(*) FROM jobs WHERE queue = 'reports' AND status = 'pending'`); n != 10 {
		t.Fatalf("%d reports jobs pending while paused; want all 10", n)
	}
	close(release) // the running ones finish
	testwait.For(t, 10*time.Second, "the 4 running reports jobs to complete", func() bool {
		return r.count(`SELECT count(*) FROM jobs WHERE queue = 'reports' AND status = 'completed'`) == 4
	})
	if n := r.count(`SELECT count(*) FROM jobs WHERE queue = 'reports' AND status <> 'completed' AND status <> 'pending'`); n != 0 {
		t.Fatalf("%d reports jobs leased while paused", n)
	}
	if _, err := r.store.QueueSetPaused(r.ctx, "reports", false); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "every reports job to complete after resume", func() bool {
		return r.count(`SELECT count(*) FROM jobs WHERE queue = 'reports' AND status = 'completed'`) == 14
	})
}

// Weights: while every queue has due jobs, each gets about its weight's
// share of the starts, whatever the priorities (priority orders jobs within
// a queue only), and the weight-1 queue is served from the start.
func TestDispatchWeightedShares(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	weights := []wire.QueueWeight{{Name: "critical", Weight: 6}, {Name: "default", Weight: 3}, {Name: "low", Weight: 1}}
	r.insertIn("critical", 0, 400)
	r.insertIn("default", 0, 400)
	r.insertIn("low", 9, 400) // the highest priority: by priority alone it would go first
	w1 := r.fakeWorker("w1", 10, weights, nil)
	w2 := r.fakeWorker("w2", 10, weights, nil)
	r.dispatchAndApply()
	testwait.For(t, 10*time.Second, "400 jobs to start", func() bool { return len(w1.deliveries())+len(w2.deliveries()) >= 400 })
	var all []wire.Delivery
	for _, w := range []*fakeWorker{w1, w2} {
		all = append(all, w.deliveries()...)
	}
	// The first 400 starts, by when they were leased (a job's id order
	// within its queue is its start order; across queues, take every
	// start: all queues had work throughout, critical's 400 last longest).
	n := map[string]int{}
	for _, d := range all {
		n[d.Queue]++
	}
	total := n["critical"] + n["default"] + n["low"]
	share := func(q string) float64 { return float64(n[q]) / float64(total) }
	if c, d, l := share("critical"), share("default"), share("low"); c < 0.5 || c > 0.7 || d < 0.2 || d > 0.4 || l < 0.05 || l > 0.15 {
		t.Fatalf("shares of %d starts: critical %.2f, default %.2f, low %.2f; want about 0.6, 0.3, 0.1", total, c, d, l)
	}
	if n["low"] == 0 || n["critical"] >= 400 {
		t.Fatalf("starts %v: a queue starved or ran out, the shares prove nothing", n)
	}
}

// A cap holds across several workers: never more of the queue's jobs
// running at once than the cap, while the other queue fills the slots.
func TestDispatchQueueCap(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if _, err := r.store.QueueSetConcurrency(r.ctx, "reports", 2); err != nil {
		t.Fatal(err)
	}
	var running, most atomic.Int64
	run := func(d wire.Delivery) {
		if d.Queue != "reports" {
			return
		}
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond) // the job's work: runs overlap as real ones do, so the cap is tested
		running.Add(-1)
	}
	for _, id := range []string{"w1", "w2", "w3"} {
		r.fakeWorker(id, 5, nil, run)
	}
	r.insertIn("reports", 5, 30)
	r.insertIn("default", 0, 60)
	r.dispatchAndApply()
	testwait.For(t, 10*time.Second, "every job to complete", func() bool {
		return r.count(`SELECT count(*) FROM jobs WHERE status = 'completed'`) == 90
	})
	if m := most.Load(); m != 2 {
		t.Fatalf("at most %d reports jobs ran at once; want exactly the cap, 2", m)
	}
}
