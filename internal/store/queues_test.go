package store_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// insertQueue creates n jobs named "q" in queue at priority and returns
// their ids.
func (e *env) insertQueue(t *testing.T, queue string, priority, n int) []int64 {
	t.Helper()
	ps := make([]store.JobInsertParams, n)
	for i := range ps {
		ps[i] = store.JobInsertParams{Name: "q", Queue: queue, Priority: priority}
	}
	return e.insert(t, ps...)
}

// claimQueues runs JobClaimQueues for n slots of worker "w" and counts the
// claimed jobs by queue.
func (e *env) claimQueues(t *testing.T, queues []string, shares []int32, n int) map[string]int {
	t.Helper()
	slots := make([]string, n)
	for i := range slots {
		slots[i] = "w"
	}
	cs, err := e.s.JobClaimQueues(e.ctx, store.JobClaimQueuesParams{
		JobClaimParams: store.JobClaimParams{Epoch: e.epoch, Slots: slots, Lease: time.Minute},
		Queues:         queues, Shares: shares})
	if err != nil {
		t.Fatalf("claim by queue: %v", err)
	}
	out := map[string]int{}
	seen := map[int64]bool{}
	for _, c := range cs {
		if seen[c.ID] {
			t.Fatalf("job %d claimed twice", c.ID)
		}
		seen[c.ID] = true
		out[c.Queue]++
	}
	return out
}

func (e *env) setQueue(t *testing.T, name string, paused bool, concurrency int) {
	t.Helper()
	if _, err := e.s.QueueSetPaused(e.ctx, name, paused); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.QueueSetConcurrency(e.ctx, name, concurrency); err != nil {
		t.Fatal(err)
	}
}

// A paused queue's jobs are not claimed, even ahead of the others in
// priority; resumed, they are again. A queue's row with nothing set
// counts as no row.
func TestJobClaimQueuesSkipsPausedQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insertQueue(t, "bulk", 10, 50)
	e.insertQueue(t, "default", 0, 5)
	e.setQueue(t, "bulk", true, 0)

	if got := e.claimQueues(t, nil, nil, 20); !counts(got, map[string]int{"default": 5}) {
		t.Fatalf("claim with bulk paused = %v; want the 5 default jobs only", got)
	}
	if got := e.claimQueues(t, []string{"bulk"}, []int32{20}, 20); len(got) != 0 {
		t.Fatalf("claim of the paused queue by name = %v; want nothing", got)
	}
	settings, err := e.s.QueueSettingsList(e.ctx)
	if err != nil || len(settings) != 1 || settings[0].Name != "bulk" || !settings[0].Paused {
		t.Fatalf("settings = %+v, %v; want bulk paused", settings, err)
	}
	e.setQueue(t, "bulk", false, 0)
	if settings, err := e.s.QueueSettingsList(e.ctx); err != nil || len(settings) != 0 {
		t.Fatalf("settings after resume = %+v, %v; want none (a row with nothing set)", settings, err)
	}
	if got := e.claimQueues(t, nil, nil, 20); !counts(got, map[string]int{"bulk": 20}) {
		t.Fatalf("claim after resume = %v; want 20 bulk jobs", got)
	}
}

// A capped queue never has more than its cap leased, counted in the
// claim's transaction across every worker; the slots it cannot take go to
// other queues; a finished job frees room.
func TestJobClaimQueuesCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insertQueue(t, "reports", 5, 30)
	e.insertQueue(t, "default", 0, 30)
	e.setQueue(t, "reports", false, 3)

	if got := e.claimQueues(t, nil, nil, 10); !counts(got, map[string]int{"reports": 3, "default": 7}) {
		t.Fatalf("first claim = %v; want 3 reports (its cap) and 7 default", got)
	}
	if got := e.claimQueues(t, []string{"reports", "default"}, []int32{8, 2}, 10); !counts(got, map[string]int{"default": 10}) {
		t.Fatalf("second claim = %v; want no reports job (at its cap)", got)
	}
	var id, token int64
	var worker string
	if err := e.db.QueryRow(e.ctx, `SELECT id, lease_token, worker_id FROM jobs WHERE queue = 'reports' AND status = 'leased' LIMIT 1`).
		Scan(&id, &token, &worker); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{{ID: id, LeaseToken: token, WorkerID: worker}}); err != nil {
		t.Fatal(err)
	}
	if got := e.claimQueues(t, []string{"reports"}, nil, 10); !counts(got, map[string]int{"reports": 1}) {
		t.Fatalf("claim after one finished = %v; want 1 reports job", got)
	}
	var leased int
	e.scalar(t, &leased, `SELECT count(*) FROM jobs WHERE queue = 'reports' AND status = 'leased'`)
	if leased != 3 {
		t.Fatalf("%d reports jobs leased; want 3", leased)
	}
}

// Shares: each queue gets its share first; what a queue cannot use goes
// to the others in priority order; a queue with share 0 only gets what the
// others leave.
func TestJobClaimQueuesShares(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insertQueue(t, "critical", 0, 100)
	e.insertQueue(t, "low", 9, 100) // higher priority: shares still hold
	e.insertQueue(t, "spare", 0, 100)

	qs := []string{"critical", "low", "spare"}
	if got := e.claimQueues(t, qs, []int32{6, 4, 0}, 10); !counts(got, map[string]int{"critical": 6, "low": 4}) {
		t.Fatalf("claim with shares 6/4/0 = %v", got)
	}
	e.exec(t, `DELETE FROM jobs WHERE queue = 'critical' AND status = 'pending' AND id NOT IN
		(SELECT id FROM jobs WHERE queue = 'critical' AND status = 'pending' ORDER BY id LIMIT 2)`)
	// critical has 2 left: its other 4 slots go by priority, to low first.
	if got := e.claimQueues(t, qs, []int32{6, 4, 0}, 10); !counts(got, map[string]int{"critical": 2, "low": 8}) {
		t.Fatalf("claim with critical short = %v; want critical 2, low 8", got)
	}
	e.exec(t, `DELETE FROM jobs WHERE queue IN ('critical', 'low') AND status = 'pending'`)
	if got := e.claimQueues(t, qs, []int32{6, 4, 0}, 10); !counts(got, map[string]int{"spare": 10}) {
		t.Fatalf("claim with only spare left = %v; want spare 10", got)
	}
	if got := e.claimQueues(t, []string{"other"}, []int32{10}, 10); len(got) != 0 {
		t.Fatalf("claim of an empty queue = %v", got)
	}
}

// Without shares, the claim is priority, due time, id order across every
// queue, as dts_claim_jobs orders: the same jobs in the same slots.
func TestJobClaimQueuesOrderMatchesPlainClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 30 {
		e.insertQueue(t, fmt.Sprintf("q%d", i%4), i%3, 1)
	}
	var want []int64
	if err := e.db.QueryRow(e.ctx, `SELECT array_agg(id ORDER BY priority DESC, next_run_at, id) FROM
		(SELECT * FROM jobs ORDER BY priority DESC, next_run_at, id LIMIT 12) x`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	e.setQueue(t, "unrelated", false, 100) // something configured
	slots := []string{"a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "b", "c"}
	cs, err := e.s.JobClaimQueues(e.ctx, store.JobClaimQueuesParams{
		JobClaimParams: store.JobClaimParams{Epoch: e.epoch, Slots: slots, Lease: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64]string{}
	for _, c := range cs {
		got[c.ID] = c.WorkerID
	}
	if len(got) != len(want) {
		t.Fatalf("claimed %d jobs; want %d", len(got), len(want))
	}
	for i, id := range want {
		if got[id] != slots[i] {
			t.Errorf("job %d (#%d by priority) went to %q; want %q", id, i, got[id], slots[i])
		}
	}
}

// The claim by queue is fenced like every leader write.
func TestJobClaimQueuesFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insertQueue(t, "default", 0, 3)
	old := e.epoch
	if err := e.s.LeaderResign(e.ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.LeaderAcquire(e.ctx, "successor", time.Hour); err != nil {
		t.Fatal(err)
	}
	_, err := e.s.JobClaimQueues(e.ctx, store.JobClaimQueuesParams{
		JobClaimParams: store.JobClaimParams{Epoch: old, Slots: []string{"w"}, Lease: time.Minute}})
	if !errors.Is(err, job.ErrDeposed) {
		t.Fatalf("claim by a deposed leader: %v; want ErrDeposed", err)
	}
	var leased int
	e.scalar(t, &leased, `SELECT count(*) FROM jobs WHERE status = 'leased'`)
	if leased != 0 {
		t.Fatalf("%d leased after a refused claim", leased)
	}
}

// A queue's claim reads its own index: a paused queue's backlog ahead of it
// in priority order is not walked. The plan is checked on a generic plan, as
// the coordinator's sessions use.
func TestJobClaimQueuesUsesQueueIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, `INSERT INTO jobs (name, queue, priority) SELECT 'q', 'bulk', 9 FROM generate_series(1, 20000)`)
	e.insertQueue(t, "default", 0, 3)
	e.exec(t, `ANALYZE jobs`)
	e.setQueue(t, "bulk", true, 0)
	conn, err := pgx.Connect(e.ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(e.ctx)
	if _, err := conn.Exec(e.ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	// Every queue (a loose scan, then each queue's index), then by name
	// with shares (each queue's index): each in a transaction rolled back,
	// whose statistics are read before the rollback.
	for _, c := range []struct {
		what, sql string
	}{
		{"every queue", `SELECT count(*) FROM dts_claim_queue_jobs($1, NULL, NULL, NULL, $2, $3, 10000)`},
		{"by name with shares", `SELECT count(*) FROM dts_claim_queue_jobs($1, NULL, '{bulk,default}', '{2,2}', $2, $3, 10000)`},
	} {
		tx, err := conn.Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := tx.QueryRow(e.ctx, c.sql, e.epoch, []string{"w", "w", "w", "w"}, []int64{1, 2, 3, 4}).Scan(&n); err != nil {
			t.Fatal(err)
		}
		var seq, read int64
		if err := tx.QueryRow(e.ctx, `SELECT seq_scan, idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'jobs'`).
			Scan(&seq, &read); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(e.ctx); err != nil {
			t.Fatal(err)
		}
		if n != 3 || seq != 0 || read > 1000 {
			t.Errorf("%s: claim past a paused backlog of 20,000 leased %d, %d sequential scans, %d rows fetched; want 3, 0, a few",
				c.what, n, seq, read)
		}
	}
}

// QueueStatsList counts each queue's jobs and shows its settings, a
// configured queue without jobs included.
func TestQueueStatsList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insertQueue(t, "a", 0, 4)
	e.insert(t, store.JobInsertParams{Name: "q", Queue: "a", Delay: time.Hour})
	e.insertQueue(t, "b", 0, 2)
	cs := e.claim(t, nil, "w", "w", "w", "w", "w", "w") // a's 4 due, then b's 2
	var done []store.Completion
	for _, c := range cs {
		if c.Queue == "b" {
			done = append(done, store.Completion{ID: c.ID, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID})
		}
	}
	if _, err := e.s.JobCompleteMany(e.ctx, e.epoch, done); err != nil {
		t.Fatal(err)
	}
	e.insertQueue(t, "a", 0, 1)
	e.setQueue(t, "empty", true, 7)

	st, err := e.s.QueueStatsList(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(st))
	for i, s := range st {
		names[i] = s.Name
	}
	if !slices.Equal(names, []string{"a", "b", "empty"}) {
		t.Fatalf("queues = %v", names)
	}
	a, b, empty := st[0], st[1], st[2]
	if a.Depth != 1 || a.Pending != 2 || a.Running != 4 || a.Completed != 0 || a.Paused || a.OldestAge < 0 {
		t.Errorf("a = %+v; want depth 1, pending 2, running 4", a)
	}
	if b.Depth != 0 || b.Running != 0 || b.Completed != 2 || b.Failed != 0 {
		t.Errorf("b = %+v; want 2 completed", b)
	}
	if !empty.Paused || empty.Concurrency != 7 || empty.Depth != 0 {
		t.Errorf("empty = %+v; want paused, cap 7", empty)
	}
}

func counts(got, want map[string]int) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestQueueStatsListIdleDead: a queue with nothing waiting, running or
// finished in the last minute but dead jobs is listed, with their count
// (before, it vanished from GET /queues a minute after its last failure).
func TestQueueStatsListIdleDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insertQueue(t, "idle", 0, 3)
	e.exec(t, `UPDATE jobs SET status = 'failed', attempts = 1, finished_at = now() - interval '2 hours', dead_reason = 'permanent' WHERE queue = 'idle'`)
	st, err := e.s.QueueStatsList(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Name != "idle" || st[0].Dead != 3 || st[0].Failed != 0 || st[0].Pending != 0 {
		t.Errorf("queues = %+v; want idle with 3 dead", st)
	}
}
