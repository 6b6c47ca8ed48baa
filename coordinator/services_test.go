package coordinator

// Tests of the leader's services in process, against real PostgreSQL and
// Redis: each builds the services it needs over a leaderState, and drives
// faults (a paused reader, a locked table, Redis away, a poison result, a
// replaced heartbeat stream) directly.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/startstop/startstoptest"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// rig is one leader's state over its own database and key prefix.
type rig struct {
	t     *testing.T
	ctx   context.Context
	store *store.Store
	queue *queue.Queue
	db    *pgxpool.Pool
	rdb   *redis.Client
	keys  queue.Keys
	b     base
	clock *testClock
}

// testClock is the services' clock (base.now) in a rig: time.Now, moved
// ahead by what the test advanced it, so that a stall of the leader ages
// its own progress at once. Redis's and PostgreSQL's clocks do not move:
// what a test judges on them (heartbeats' arrival, leases) takes real time.
type testClock struct {
	mu    sync.Mutex
	ahead time.Duration
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.ahead)
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ahead += d
}

// newRig makes a leader of a fresh database, with a 100 ms heartbeat
// interval (a worker is unavailable after 300 ms of silence) and a 2 s lease.
func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	st, err := store.Open(ctx, url, store.Options{MaxConns: 8, PinIndexPlans: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	prefix := redistest.Prefix(t)
	q, err := queue.Open(ctx, redistest.URL(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	opt, _ := redis.ParseURL(redistest.URL())
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	epoch, err := st.LeaderAcquire(ctx, "test", time.Hour)
	if err != nil || epoch == 0 {
		t.Fatalf("acquire: %d %v", epoch, err)
	}
	cfg := Config{DatabaseURL: url, RedisURL: redistest.URL(), HeartbeatInterval: 100 * time.Millisecond,
		LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond}.WithDefaults()
	l := newLeaderState(epoch, cfg.workerDeadline())
	clock := &testClock{}
	b := base{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics(prometheus.NewRegistry()), l: l, now: clock.now}
	if testing.Verbose() {
		b.log = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	return &rig{t: t, ctx: ctx, store: st, queue: q, db: db, rdb: rdb, keys: queue.Keys{Prefix: prefix}, b: b, clock: clock}
}

func (r *rig) heartbeatReader() *heartbeatReader {
	return &heartbeatReader{base: r.b, store: r.store, queue: r.queue,
		allowed: func(context.Context, wire.Heartbeat) bool { return true }}
}

func (r *rig) reaper() *reaper {
	return &reaper{base: r.b, store: r.store, queue: r.queue, retry: func(int) time.Duration { return 0 }}
}

func (r *rig) results() *resultApplier {
	return &resultApplier{base: r.b, store: r.store, queue: r.queue, retry: func(int) time.Duration { return 0 },
		allowed: func(rs []queue.ReceivedResult) []queue.ReceivedResult { return rs }}
}

// unreachableQueue is a queue whose Redis has stopped: every call fails
// as against a Redis that is down.
func (r *rig) unreachableQueue() *queue.Queue {
	r.t.Helper()
	srv := redistest.Start(r.t)
	q, err := queue.Open(r.ctx, srv.URL(), "down:")
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = q.Close() })
	srv.Stop()
	return q
}

// start starts a service and stops it when the test ends.
func (r *rig) start(s startstop.Service) {
	r.t.Helper()
	if err := s.Start(r.ctx); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(s.Stop)
}

// insertLeased inserts n jobs with no retries and leases them to worker.
func (r *rig) insertLeased(n int, worker string) []store.Claimed {
	r.t.Helper()
	ps := make([]store.JobInsertParams, n)
	for i := range ps {
		ps[i] = store.JobInsertParams{Name: "sleep", Payload: json.RawMessage(`null`)}
	}
	if _, err := r.store.JobInsert(r.ctx, ps); err != nil {
		r.t.Fatal(err)
	}
	slots := make([]string, n)
	for i := range slots {
		slots[i] = worker
	}
	cs, err := r.store.JobClaimBatch(r.ctx, store.JobClaimParams{Epoch: r.b.l.epoch, Slots: slots, Lease: r.b.cfg.LeaseDuration})
	if err != nil || len(cs) != n {
		r.t.Fatalf("claim = %d, %v", len(cs), err)
	}
	for _, c := range cs {
		r.b.l.workers.Assigned(worker, c.ID, c.LeaseToken, time.Now())
	}
	return cs
}

// beat sends heartbeats for worker, naming its running jobs, every 50 ms
// until the returned stop is called (or the test ends).
func (r *rig) beat(worker string, running []store.Claimed) (stop func()) {
	ctx, cancel := context.WithCancel(r.ctx)
	var wg sync.WaitGroup
	hb := wire.Heartbeat{WorkerID: worker, JobTypes: []string{"*"}, Concurrency: 8}
	for _, c := range running {
		hb.InFlight = append(hb.InFlight, wire.InFlight{JobID: c.ID, LeaseToken: c.LeaseToken})
	}
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			_ = r.queue.SendHeartbeat(ctx, hb)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	stop = func() { cancel(); wg.Wait() }
	r.t.Cleanup(stop)
	return stop
}

// states returns each job's state.
func (r *rig) states(cs []store.Claimed) map[int64]string {
	r.t.Helper()
	out := map[int64]string{}
	for _, c := range cs {
		var s string
		if err := r.db.QueryRow(r.ctx, `SELECT status FROM jobs WHERE id = $1`, c.ID).Scan(&s); err != nil {
			r.t.Fatal(err)
		}
		out[c.ID] = s
	}
	return out
}

func allIn(m map[int64]string, want string) bool {
	for _, s := range m {
		if s != want {
			return false
		}
	}
	return true
}

// caughtUp waits until the heartbeat reader has caught up after now.
func (r *rig) caughtUp() {
	r.t.Helper()
	since := r.clock.now()
	testwait.For(r.t, 10*time.Second, "the heartbeat reader to catch up", func() bool {
		r.b.l.live.mu.Lock()
		defer r.b.l.live.mu.Unlock()
		return r.b.l.live.at.After(since)
	})
}

// TestPausedReaderExpiresNobody: a leader whose heartbeat reader fell
// behind (paused, as by SIGSTOP or a GC pause) while its workers went on
// heartbeating judges nobody until it has caught up, and then finds them
// alive: their heartbeats are timed by when they reached Redis.
func TestPausedReaderExpiresNobody(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(3, "w")
	r.beat("w", cs)
	h := r.heartbeatReader()
	r.start(h)
	r.caughtUp()
	rp := r.reaper()

	h.Stop() // the reader stalls; heartbeats keep arriving in Redis
	// The stall lasts ten worker deadlines on the leader's clock, the
	// reaper ticking through it.
	for range 10 {
		r.clock.advance(r.b.cfg.workerDeadline())
		rp.tick(r.ctx)
	}
	if n := testutil.ToFloat64(r.b.metrics.reaperSkipped); n == 0 {
		t.Error("the reaper judged workers while the reader was stalled")
	}
	r.start(r.heartbeatReader()) // it wakes up and reads what arrived meanwhile
	r.caughtUp()
	for range 8 {
		rp.tick(r.ctx)
	}
	if got := r.states(cs); !allIn(got, "leased") {
		t.Fatalf("after the stall: %v; want every job still leased", got)
	}
	if !r.b.l.workers.Usable("w") {
		t.Error("the live worker was declared unavailable")
	}
}

// TestLockedTableReclaimsNothing: while the jobs table is locked (the
// reader's lease extension and the reaper's reclaim both wait), leases
// whose deadline passes meanwhile are extended once the lock goes, before
// any reclaim judges them.
func TestLockedTableReclaimsNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(3, "w")
	r.beat("w", cs)
	r.start(r.heartbeatReader())
	r.caughtUp()
	rp := r.reaper()
	rctx, stopReaper := context.WithCancel(r.ctx)
	var wg sync.WaitGroup
	wg.Go(func() { rp.run(rctx) })
	defer func() { stopReaper(); wg.Wait() }()

	tx, err := r.db.Begin(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(r.ctx, `LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var last time.Time
	if err := tx.QueryRow(r.ctx, `SELECT max(lease_expires_at) FROM jobs`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, r.b.cfg.LeaseDuration+5*time.Second, "every lease's deadline to pass under the lock", func() bool {
		var passed bool
		if err := tx.QueryRow(r.ctx, `SELECT clock_timestamp() > $1`, last).Scan(&passed); err != nil {
			t.Fatal(err)
		}
		return passed
	})
	if err := tx.Commit(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.caughtUp()
	r.caughtUp()
	stopReaper()
	wg.Wait()
	if got := r.states(cs); !allIn(got, "leased") {
		t.Fatalf("after the lock: %v; want every job still leased", got)
	}
}

// TestTakeOverWithRedisDownReclaimsNothing: a new leader that cannot read
// heartbeats (Redis unreachable) reclaims no lease, not even one whose
// deadline has passed: it cannot tell a dead worker from its blindness.
func TestTakeOverWithRedisDownReclaimsNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(2, "w")
	if _, err := r.db.Exec(r.ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	down := r.unreachableQueue()
	h := &heartbeatReader{base: r.b, store: r.store, queue: down, allowed: func(context.Context, wire.Heartbeat) bool { return true }}
	r.start(h)
	rp := &reaper{base: r.b, store: r.store, queue: down, retry: func(int) time.Duration { return 0 }}
	// The reaper judges over and over until the reader has tried Redis and
	// failed (a read takes its dial retries, about a second).
	failed := r.b.metrics.redisErrors.WithLabelValues(string(redisOpHeartbeatRead))
	testwait.For(t, 10*time.Second, "the heartbeat reader to fail a read", func() bool {
		rp.tick(r.ctx)
		return testutil.ToFloat64(failed) >= 1
	})
	if got := r.states(cs); !allIn(got, "leased") {
		t.Fatalf("with Redis down: %v; want every job still leased", got)
	}
}

// sendResults puts results on the results stream as workers do.
func (r *rig) sendResults(rs ...wire.Result) {
	r.t.Helper()
	if err := r.queue.SendResults(r.ctx, rs); err != nil {
		r.t.Fatal(err)
	}
}

func completed(c store.Claimed, result string) wire.Result {
	return wire.Result{JobID: c.ID, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID, Attempt: 1,
		Outcome: wire.OutcomeCompleted, Result: json.RawMessage(result), StartedAt: time.Now(), FinishedAt: time.Now()}
}

// TestPoisonResultStopsNothing: a result PostgreSQL cannot store (a number
// out of numeric's range) becomes a failed attempt that says why; so does
// one it refuses for a value it holds (a CHECK: job.ErrBadData), found by
// applying the batch row by row; the good results of the same batches
// complete.
func TestPoisonResultStopsNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(6, "w")
	// Any result holding "refuse" is refused by PostgreSQL, as a CHECK
	// or a trigger of an operator's could.
	if _, err := r.db.Exec(r.ctx, `ALTER TABLE jobs ADD CONSTRAINT no_refuse CHECK (result IS NULL OR NOT result ? 'refuse')`); err != nil {
		t.Fatal(err)
	}
	r.sendResults(completed(cs[0], `{"n":1}`), completed(cs[1], `{"x":1e-20000}`), completed(cs[2], `2`),
		completed(cs[3], `{"refuse":true}`), completed(cs[4], `[1e200000]`), completed(cs[5], `"ok"`))
	r.start(r.results())
	testwait.For(t, 10*time.Second, "every result applied", func() bool {
		st := r.states(cs)
		return st[cs[0].ID] == "completed" && st[cs[2].ID] == "completed" && st[cs[5].ID] == "completed" &&
			st[cs[1].ID] == "failed" && st[cs[3].ID] == "failed" && st[cs[4].ID] == "failed"
	})
	for _, c := range []store.Claimed{cs[1], cs[3], cs[4]} {
		var reason, msg string
		if err := r.db.QueryRow(r.ctx, `SELECT errors->0->>'reason', last_error FROM jobs WHERE id = $1`, c.ID).Scan(&reason, &msg); err != nil {
			t.Fatal(err)
		}
		if reason != job.ReasonInvalidResult || msg == "" {
			t.Errorf("job %d: reason %q, error %q; want invalid_result with a message", c.ID, reason, msg)
		}
	}
	// The stream is empty: nothing is left to be read again forever.
	testwait.For(t, 10*time.Second, "the results acknowledged", func() bool {
		n, _ := r.rdb.XLen(r.ctx, r.keys.Results()).Result()
		return n == 0
	})
}

// TestOrphanedResultsAreReadAgain: a result that sits in the leader's
// pending list, read but never acknowledged (by a deposed leader, or whose
// ack failed), after the applier's first pending read, is applied by the
// periodic re-read instead of waiting there forever.
func TestOrphanedResultsAreReadAgain(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(1, "w")
	a := r.results()
	a.rescan = 300 * time.Millisecond
	r.start(a)
	// The applier is past its first pending read once it has applied
	// something.
	first := r.insertLeased(1, "w")
	r.sendResults(completed(first[0], `0`))
	testwait.For(t, 10*time.Second, "the first result applied", func() bool { return r.states(first)[first[0].ID] == "completed" })

	// Another reader takes the next result, and hands it to the leader's
	// pending list without delivering it (XCLAIM): only a re-read of the
	// pending list can find it now.
	// (MULTI, so that the applier blocked on new entries cannot get it
	// first: blocked readers are served after the transaction.)
	b, _ := json.Marshal(completed(cs[0], `1`))
	pipe := r.rdb.TxPipeline()
	pipe.XAdd(r.ctx, &redis.XAddArgs{Stream: r.keys.Results(), Values: []any{"r", b}})
	read := pipe.XReadGroup(r.ctx, &redis.XReadGroupArgs{Group: queue.ResultsGroup, Consumer: "rival",
		Streams: []string{r.keys.Results(), ">"}, Count: 10, Block: -1})
	if _, err := pipe.Exec(r.ctx); err != nil {
		t.Fatal(err)
	}
	got := read.Val()
	if len(got) != 1 || len(got[0].Messages) != 1 {
		t.Fatalf("rival read = %v; want the one result", got)
	}
	id := got[0].Messages[0].ID
	if err := r.rdb.XClaim(r.ctx, &redis.XClaimArgs{Stream: r.keys.Results(), Group: queue.ResultsGroup,
		Consumer: queue.ResultsConsumer, Messages: []string{id}}).Err(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the orphaned result applied", func() bool { return r.states(cs)[cs[0].ID] == "completed" })
}

// TestHeartbeatIDsBackwards: when the heartbeat stream is replaced by one
// whose ids are lower than the reader's cursor (Redis replaced, or its
// clock went back), the reader notices, reads on from the new end, and the
// workers stay available.
func TestHeartbeatIDsBackwards(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(1, "w")
	// An entry an hour ahead moves the reader's cursor there.
	future := fmt.Sprintf("%d-0", time.Now().Add(time.Hour).UnixMilli())
	hb, _ := json.Marshal(wire.Heartbeat{WorkerID: "w", JobTypes: []string{"*"}, Concurrency: 8,
		InFlight: []wire.InFlight{{JobID: cs[0].ID, LeaseToken: cs[0].LeaseToken}}})
	if err := r.rdb.XAdd(r.ctx, &redis.XAddArgs{Stream: r.keys.Heartbeats(), ID: future, Values: []any{"h", hb}}).Err(); err != nil {
		t.Fatal(err)
	}
	r.start(r.heartbeatReader())
	r.caughtUp()
	if err := r.rdb.Del(r.ctx, r.keys.Heartbeats()).Err(); err != nil {
		t.Fatal(err)
	}
	replaced, err := r.rdb.Time(r.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	r.beat("w", cs) // new entries, with ids below the cursor
	rp := r.reaper()
	// Silence is judged on Redis's clock, so only real time tells: tick
	// the reaper until the reader has caught up to three worker deadlines
	// after the replacement, by when a worker whose heartbeats the reader
	// no longer saw is unavailable.
	mark := replaced.Add(3 * r.b.cfg.workerDeadline())
	testwait.For(t, 10*time.Second, "the reader's horizon three worker deadlines past the replacement", func() bool {
		horizon, ok := r.b.l.live.fresh(r.clock.now(), rp.maxHeartbeatLag())
		rp.tick(r.ctx)
		return ok && horizon.After(mark)
	})
	if !r.b.l.workers.Usable("w") {
		t.Error("the worker was declared unavailable: the reader stopped seeing its heartbeats")
	}
	if n := testutil.ToFloat64(r.b.metrics.heartbeatResets.WithLabelValues("ids_backwards")); n < 1 {
		t.Errorf("resets counted: %v, want at least 1", n)
	}
	if got := r.states(cs); !allIn(got, "leased") {
		t.Errorf("jobs: %v; want still leased", got)
	}
}

// TestDispatchGroupErrorStopsNoOtherGroup: a group of workers whose claim
// PostgreSQL refuses (a job type with a NUL, which the decoder now refuses
// before it gets here) does not keep the other groups from claiming.
func TestDispatchGroupErrorStopsNoOtherGroup(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if _, err := r.store.JobInsert(r.ctx, []store.JobInsertParams{{Name: "x", Payload: json.RawMessage(`null`)}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "bad", JobTypes: []string{"bad\x00type"}, Concurrency: 1}, now)
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "good", JobTypes: []string{"*"}, Concurrency: 1}, now)
	d := &dispatcher{base: r.b, store: r.store, queue: r.queue}
	if _, err := d.roundDelivered(r.ctx, scopeAll); err == nil {
		t.Error("the bad group's claim did not fail; the test proves nothing")
	}
	var worker string
	if err := r.db.QueryRow(r.ctx, `SELECT coalesce(worker_id, '') FROM jobs`).Scan(&worker); err != nil {
		t.Fatal(err)
	}
	if worker != "good" {
		t.Errorf("job leased to %q; want the good group's worker", worker)
	}
}

// TestDeadMirrorHoldsMetadataOnly: the Redis dead-letter mirror, rebuilt
// page by page, holds ids and metadata of every dead job, never a payload
// or the error history, whatever the jobs carry.
func TestDeadMirrorHoldsMetadataOnly(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	big := `{"blob":"` + strings.Repeat("x", 512<<10) + `"}`
	const n = 2500 // more than two pages
	if _, err := r.db.Exec(r.ctx, `INSERT INTO jobs (name, payload, status, attempts, max_retries, last_error, dead_reason, finished_at)
		SELECT 'big', CASE WHEN i <= 3 THEN $1::jsonb ELSE '1' END, 'failed', 1, 0, repeat('e', 5000), 'permanent',
			now() - i * interval '1 second'
		FROM generate_series(1, $2) AS i`, big, n); err != nil {
		t.Fatal(err)
	}
	m := &maintainer{base: r.b, store: r.store, queue: r.queue}
	m.mirrorDead(r.ctx)
	es, err := r.queue.DeadEntries(r.ctx, n+10)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != n {
		t.Fatalf("mirror has %d entries, want %d", len(es), n)
	}
	for i, e := range es {
		if len(e.OriginalJob.Payload) != 0 || len(e.Errors) != 0 || len(e.OriginalJob.LastError) > maxDeadEntryError {
			t.Fatalf("entry %d carries a payload (%d bytes), errors (%d) or a long error (%d)", i, len(e.OriginalJob.Payload),
				len(e.Errors), len(e.OriginalJob.LastError))
		}
		if i > 0 && e.FailedAt.After(es[i-1].FailedAt) {
			t.Fatalf("entry %d is newer than the one before it", i)
		}
	}
	used, err := r.rdb.MemoryUsage(r.ctx, r.keys.DeadLetter()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if used > 2<<20 {
		t.Errorf("the mirror of %d jobs takes %d bytes in Redis", n, used)
	}
}

// TestExpiredLeaseOfUnheardWorkerIsSpared: after a stall of the leader's
// own (here: a new leader that has read no heartbeat of the worker yet),
// leases that ran out meanwhile are not reclaimed while their worker is
// alive and the leader has not yet applied its heartbeats; once it has,
// the heartbeats have extended them. Seen in CI before this rule: after a
// 6 s table lock, the reader's first batch held only one worker's
// heartbeat, and the reaper reclaimed the other worker's running jobs.
func TestExpiredLeaseOfUnheardWorkerIsSpared(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(2, "w")
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "w", JobTypes: []string{"*"}, Concurrency: 8}, time.Now())
	if _, err := r.db.Exec(r.ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	r.start(r.heartbeatReader())
	r.caughtUp() // caught up, but nothing of w read yet
	rp := r.reaper()
	for range 4 {
		rp.tick(r.ctx)
	}
	if got := r.states(cs); !allIn(got, "leased") {
		t.Fatalf("before w's heartbeats were applied: %v; want every job still leased", got)
	}
	r.beat("w", cs)
	testwait.For(t, 10*time.Second, "w's leases extended", func() bool {
		var n int
		_ = r.db.QueryRow(r.ctx, `SELECT count(*) FROM jobs WHERE lease_expires_at > now()`).Scan(&n)
		return n == len(cs)
	})
	for range 4 {
		rp.tick(r.ctx)
	}
	if got := r.states(cs); !allIn(got, "leased") {
		t.Fatalf("after w's heartbeats: %v; want every job still leased", got)
	}
}

// TestDispatchSpeaksEachWorkersCodec: a worker that announces the binary
// codec gets its deliveries in it, marked (BatchMagic) if it also sends
// result batches; one that does not (a worker from before the codec,
// during a rolling upgrade) gets JSON.
func TestDispatchSpeaksEachWorkersCodec(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if _, err := r.store.JobInsert(r.ctx, []store.JobInsertParams{
		{Name: "old", Payload: json.RawMessage(`{"a":1}`)}, {Name: "new", Payload: json.RawMessage(`{"a":2}`)},
		{Name: "newer", Payload: json.RawMessage(`{"a":3}`)}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "old", JobTypes: []string{"old"}, Concurrency: 1}, now)
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "new", JobTypes: []string{"new"}, Concurrency: 1, Codec: wire.CodecBinary}, now)
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "newer", JobTypes: []string{"newer"}, Concurrency: 1, Codec: wire.CodecBatch}, now)
	d := &dispatcher{base: r.b, store: r.store, queue: r.queue}
	if _, err := d.roundDelivered(r.ctx, scopeAll); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		worker string
		binary bool
		magic  byte // of a binary delivery
	}{{"old", false, 0}, {"new", true, wire.BinaryMagic}, {"newer", true, wire.BatchMagic}} {
		raw, err := r.rdb.LRange(r.ctx, r.keys.WorkerJobs(c.worker), 0, -1).Result()
		if err != nil || len(raw) != 1 {
			t.Fatalf("deliveries of %s: %q, %v", c.worker, raw, err)
		}
		if wire.IsBinary([]byte(raw[0])) != c.binary || (c.binary && raw[0][0] != c.magic) {
			t.Errorf("delivery to %s = %q, want binary %v with magic %#x", c.worker, raw[0], c.binary, c.magic)
		}
		got, err := queue.DecodeDelivery([]byte(raw[0]))
		if err != nil || got.Name != c.worker {
			t.Errorf("delivery to %s decodes as %+v, %v", c.worker, got, err)
		}
	}
}

// expiredCounter counts the scans for leases that ran out.
type expiredCounter struct {
	*store.Store
	scans int
}

func (c *expiredCounter) JobReclaimExpired(ctx context.Context, epoch int64, spare []string, policy store.RetryPolicy) ([]store.FailOutcome, error) {
	c.scans++
	return c.Store.JobReclaimExpired(ctx, epoch, spare, policy)
}

// TestExpiredScanEveryTenthOfLease: the reaper judges silent workers every
// tick, but scans PostgreSQL for leases that ran out once per tenth of the
// lease (2 s here: every 200 ms, not every 25 ms tick).
func TestExpiredScanEveryTenthOfLease(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	counter := &expiredCounter{Store: r.store}
	rp := r.reaper()
	rp.store = counter
	if got, want := rp.expiredEvery(), 200*time.Millisecond; got != want {
		t.Fatalf("expiredEvery = %v, want %v", got, want)
	}
	now := time.Now()
	r.b.l.live.caughtUp(now, now)
	for range 5 {
		rp.tick(r.ctx)
	}
	if counter.scans != 1 {
		t.Fatalf("5 ticks in a row scanned %d times, want 1", counter.scans)
	}
	rp.expiredAt = rp.expiredAt.Add(-rp.expiredEvery())
	rp.tick(r.ctx)
	if counter.scans != 2 {
		t.Errorf("a tick a tenth of the lease later: %d scans in all, want 2", counter.scans)
	}
}

// TestLeaderServicesStartStop starts and stops each of the leader's
// services from several goroutines at once: every Stop returns, and none
// leaves a goroutine behind.
func TestLeaderServicesStartStop(t *testing.T) {
	r := newRig(t)
	for _, s := range []startstop.Service{
		&dispatcher{base: r.b, store: r.store, queue: r.queue},
		r.heartbeatReader(),
		r.results(),
		r.reaper(),
		r.scheduler(),
		&maintainer{base: r.b, store: r.store, queue: r.queue},
	} {
		t.Run(fmt.Sprintf("%T", s), func(t *testing.T) { startstoptest.Stress(t, s) })
	}
}
