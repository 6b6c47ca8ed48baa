package coordinator

// Limits in the dispatcher, against real PostgreSQL and Redis: which
// claims run, and each limit holding across three workers with 1,000 jobs.
// Workers are simulated over the real Redis lists and results stream
// (fakeWorker, queues_test.go), so the dispatcher and the result applier
// run exactly as in production.

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// limitCountingStore is the real store, counting the claims the
// dispatcher calls.
type limitCountingStore struct {
	*store.Store
	plain, limited atomic.Int64
}

func (s *limitCountingStore) JobClaimBatch(ctx context.Context, p store.JobClaimParams) ([]store.Claimed, error) {
	s.plain.Add(1)
	return s.Store.JobClaimBatch(ctx, p)
}

func (s *limitCountingStore) JobClaimGroups(ctx context.Context, p store.JobClaimGroupsParams) ([]store.Claimed, error) {
	s.plain.Add(1)
	return s.Store.JobClaimGroups(ctx, p)
}

func (s *limitCountingStore) JobClaimLimited(ctx context.Context, p store.JobClaimLimitedParams) ([]store.Claimed, error) {
	s.limited.Add(1)
	return s.Store.JobClaimLimited(ctx, p)
}

// insertKeyed inserts n jobs named name with concurrency key ck ("" for
// none).
func (r *rig) insertKeyed(name, ck string, n int) {
	r.t.Helper()
	ps := make([]store.JobInsertParams, n)
	for i := range ps {
		ps[i] = store.JobInsertParams{Name: name, ConcurrencyKey: ck, Payload: json.RawMessage(`null`)}
	}
	if _, err := r.store.JobInsert(r.ctx, ps); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) setLimit(key string, concurrency, rate int, period time.Duration) {
	r.t.Helper()
	if _, err := r.store.LimitSet(r.ctx, store.Limit{Key: key, Concurrency: concurrency, Rate: rate, Period: period}); err != nil {
		r.t.Fatal(err)
	}
}

// The unlimited path: while no job with a limit_key waits, the dispatcher
// runs the plain claim alone, even with limits configured; once keyed jobs
// wait, the limited claim runs beside it and leases them; once none is
// left, the plain claim is alone again.
func TestDispatchLimitedClaimOnlyWhileLimitedJobsWait(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := &limitCountingStore{Store: r.store}
	d := &dispatcher{base: r.b, store: cs, queue: r.queue}
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "w", JobTypes: []string{"*"}, Concurrency: 100}, time.Now())
	round := func() {
		t.Helper()
		d.limitedAt = time.Time{} // reload now, not after the poll interval
		if _, err := d.roundDelivered(r.ctx, scopeAll); err != nil {
			t.Fatal(err)
		}
	}
	r.setLimit("name:other", 1, 0, 0)
	r.setLimit("tenant", 2, 0, 0)
	r.insertKeyed("x", "", 3)
	round()
	if cs.plain.Load() != 1 || cs.limited.Load() != 0 || r.count(`SELECT count(*) FROM jobs WHERE status = 'leased'`) != 3 {
		t.Fatalf("no keyed job: plain %d, limited %d claims; want 1 and 0", cs.plain.Load(), cs.limited.Load())
	}
	r.insertKeyed("x", "tenant", 5)
	r.insertKeyed("x", "", 2)
	round()
	if cs.limited.Load() == 0 {
		t.Fatal("keyed jobs wait: the limited claim did not run")
	}
	if n := r.count(`SELECT count(*) FROM jobs WHERE status = 'leased' AND limit_key = 'tenant'`); n != 2 {
		t.Fatalf("%d tenant jobs leased; want its limit, 2", n)
	}
	if n := r.count(`SELECT count(*) FROM jobs WHERE status = 'leased' AND limit_key IS NULL`); n != 5 {
		t.Fatalf("%d unlimited jobs leased; want all 5", n)
	}
	if _, err := r.db.Exec(r.ctx, `DELETE FROM jobs WHERE limit_key IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	plain, limited := cs.plain.Load(), cs.limited.Load()
	r.insertKeyed("x", "", 1)
	round()
	if cs.plain.Load() != plain+1 || cs.limited.Load() != limited {
		t.Fatalf("keyed jobs gone: plain %d, limited %d more claims; want 1 and 0",
			cs.plain.Load()-plain, cs.limited.Load()-limited)
	}
}

// A limited wake-up (a submitter made jobs with a limit_key due) makes the
// next round run the limited claim at once, however fresh the flag that
// said no limited job waits; a plain one does not. The poll interval here
// is an hour, so the flag is never reloaded after the first round.
func TestDispatchLimitedWakeClaimsLimitedJobsAtOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.b
	b.cfg.PollInterval = time.Hour
	d := &dispatcher{base: b, store: r.store, queue: r.queue}
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "w", JobTypes: []string{"*"}, Concurrency: 100}, time.Now())
	r.start(d)
	leased := func(sql string) func() bool {
		return func() bool { return r.count(sql) > 0 }
	}
	// wakeUntil wakes the dispatcher (plain or limited) until cond holds:
	// the subscription starts in the background, and wake-ups are best
	// effort.
	wakeUntil := func(what string, limited bool, cond func() bool) {
		t.Helper()
		testwait.For(t, 10*time.Second, what, func() bool {
			if err := r.queue.Wake(r.ctx, wire.Wake{Limited: limited}); err != nil {
				t.Fatal(err)
			}
			return cond()
		})
	}
	// The first round loaded the flag: nothing limited waits.
	r.insertKeyed("x", "", 1)
	wakeUntil("the plain job leased", false, leased(`SELECT count(*) FROM jobs WHERE status = 'leased'`))

	// A keyed job and a plain one, woken plainly: the plain one is claimed,
	// the keyed one waits for the flag's reload (an hour).
	r.insertKeyed("x", "tenant", 1)
	r.insertKeyed("x", "", 1)
	wakeUntil("the second plain job leased", false, func() bool {
		return r.count(`SELECT count(*) FROM jobs WHERE status = 'leased' AND limit_key IS NULL`) == 2
	})
	if n := r.count(`SELECT count(*) FROM jobs WHERE status = 'leased' AND limit_key IS NOT NULL`); n != 0 {
		t.Fatalf("a plain wake-up leased %d keyed jobs; the test proves nothing", n)
	}
	// A limited wake-up: claimed now.
	wakeUntil("the keyed job leased", true, leased(`SELECT count(*) FROM jobs WHERE status = 'leased' AND limit_key = 'tenant'`))
}

// runTracker counts each job name's runs in progress and keeps the most,
// and each run's start time.
type runTracker struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	starts  map[string][]time.Time
	work    time.Duration
}

func newRunTracker(work time.Duration) *runTracker {
	return &runTracker{running: map[string]int{}, most: map[string]int{}, starts: map[string][]time.Time{}, work: work}
}

func (rt *runTracker) run(d wire.Delivery) {
	rt.mu.Lock()
	rt.running[d.Name]++
	rt.most[d.Name] = max(rt.most[d.Name], rt.running[d.Name])
	rt.starts[d.Name] = append(rt.starts[d.Name], time.Now())
	rt.mu.Unlock()
	// The job's work: runs must overlap for a limit to be tested, and
	// the dispatcher gives no signal that it has filled every slot it
	// may, so a run takes time, as a real one does.
	time.Sleep(rt.work)
	rt.mu.Lock()
	rt.running[d.Name]--
	rt.mu.Unlock()
}

// Concurrency limits hold across three workers: 1,000 jobs, 400 under a
// concurrency key limited to 4, 300 under a name limit of 3, and 300
// without a limit that fill the other slots; never more of a key's jobs
// running at once than its limit (a run ends before its result is
// applied, so what the workers see running is at most what is leased),
// and every job completes.
func TestDispatchConcurrencyLimitsHold(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.setLimit("tenant-a", 4, 0, 0)
	r.setLimit("name:b", 3, 0, 0)
	rt := newRunTracker(2 * time.Millisecond)
	for _, id := range []string{"w1", "w2", "w3"} {
		r.fakeWorker(id, 20, nil, rt.run)
	}
	r.insertKeyed("a", "tenant-a", 400)
	r.insertKeyed("b", "", 300)
	r.insertKeyed("c", "", 300)
	if n := r.count(`SELECT count(*) FROM jobs WHERE limit_key = 'name:b'`); n != 300 {
		t.Fatalf("%d jobs named b got the name limit's key; want 300", n)
	}
	r.dispatchAndApply()
	testwait.For(t, 60*time.Second, "every job to complete", func() bool {
		return r.count(`SELECT count(*) FROM jobs WHERE status = 'completed'`) == 1000
	})
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.most["a"] != 4 || rt.most["b"] != 3 {
		t.Fatalf("at most %d a and %d b jobs ran at once; want exactly their limits, 4 and 3", rt.most["a"], rt.most["b"])
	}
	if rt.most["c"] <= 4 {
		t.Fatalf("at most %d unlimited jobs ran at once: they did not fill the slots", rt.most["c"])
	}
}

// A rate limit holds across three workers: 1,000 jobs under a key allowed
// 250 starts a second never start faster (within any window a little
// shorter than the period, as the workers see the starts: a delivery takes
// time), so the last starts at least 3 periods after the first; unlimited
// jobs submitted beside them are not held up.
func TestDispatchRateLimitHolds(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const rate, period, slack = 250, time.Second, 250 * time.Millisecond
	r.setLimit("api", 0, rate, period)
	rt := newRunTracker(time.Millisecond)
	for _, id := range []string{"w1", "w2", "w3"} {
		r.fakeWorker(id, 100, nil, rt.run)
	}
	r.insertKeyed("call", "api", 1000)
	r.insertKeyed("free", "", 300)
	t0 := time.Now()
	r.dispatchAndApply()
	testwait.For(t, 10*time.Second, "the unlimited jobs to complete", func() bool {
		return r.count(`SELECT count(*) FROM jobs WHERE name = 'free' AND status = 'completed'`) == 300
	})
	if d := time.Since(t0); d > 3*period {
		t.Errorf("the unlimited jobs took %v: held up behind the rate-limited ones", d)
	}
	testwait.For(t, 60*time.Second, "every job to complete", func() bool {
		return r.count(`SELECT count(*) FROM jobs WHERE status = 'completed'`) == 1300
	})
	rt.mu.Lock()
	starts := slices.Clone(rt.starts["call"])
	rt.mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	if len(starts) != 1000 {
		t.Fatalf("%d starts of call jobs; want 1000", len(starts))
	}
	for i, j := 0, 0; j < len(starts); j++ {
		for starts[j].Sub(starts[i]) >= period-slack {
			i++
		}
		if j-i+1 > rate {
			t.Fatalf("%d starts within %v from %v; the rate is %d per %v", j-i+1, period-slack, starts[i], rate, period)
		}
	}
	if d := starts[len(starts)-1].Sub(starts[0]); d < 3*period-slack {
		t.Fatalf("1000 starts took %v; at %d per %v they need at least %v", d, rate, period, 3*period)
	}
}
