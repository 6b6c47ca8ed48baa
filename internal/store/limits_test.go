package store_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// insertKeyed creates n jobs named name with concurrency key ck ("" for
// none) in queue and returns their ids.
func (e *env) insertKeyed(t *testing.T, name, ck, queue string, n int) []int64 {
	t.Helper()
	ps := make([]store.JobInsertParams, n)
	for i := range ps {
		ps[i] = store.JobInsertParams{Name: name, ConcurrencyKey: ck, Queue: queue}
	}
	return e.insert(t, ps...)
}

// claimLimited runs JobClaimLimited for n slots of worker "w" and counts
// the claimed jobs by name.
func (e *env) claimLimited(t *testing.T, queues []string, n int) map[string]int {
	t.Helper()
	slots := make([]string, n)
	for i := range slots {
		slots[i] = "w"
	}
	cs, err := e.s.JobClaimLimited(e.ctx, store.JobClaimLimitedParams{
		JobClaimParams: store.JobClaimParams{Epoch: e.epoch, Slots: slots, Lease: time.Minute}, Queues: queues})
	if err != nil {
		t.Fatalf("limited claim: %v", err)
	}
	out := map[string]int{}
	for _, c := range cs {
		out[c.Name]++
	}
	return out
}

func (e *env) setLimit(t *testing.T, key string, concurrency, rate int, period time.Duration) {
	t.Helper()
	if _, err := e.s.LimitSet(e.ctx, store.Limit{Key: key, Concurrency: concurrency, Rate: rate, Period: period}); err != nil {
		t.Fatal(err)
	}
}

// completeOne completes one leased job named name.
func (e *env) completeOne(t *testing.T, name string) {
	t.Helper()
	var id, token int64
	var worker string
	if err := e.db.QueryRow(e.ctx, `SELECT id, lease_token, worker_id FROM jobs WHERE name = $1 AND status = 'leased' LIMIT 1`, name).
		Scan(&id, &token, &worker); err != nil {
		t.Fatal(err)
	}
	if fin, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{{ID: id, LeaseToken: token, WorkerID: worker}}); err != nil || len(fin) != 1 {
		t.Fatalf("complete: %v, %v", fin, err)
	}
}

// Jobs with a concurrency key are never taken by the plain claim nor by the
// claim by queue, however high their priority; the limited claim takes
// them and no others, and holds their key to its concurrency, counted in
// its own transaction; a job that finishes frees room.
func TestJobClaimLimitedConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setLimit(t, "tenant-1", 2, 0, 0)
	e.insertKeyed(t, "keyed", "tenant-1", "", 5)
	e.insertN(t, 5, "plain", 1)
	e.exec(t, `UPDATE jobs SET priority = 9 WHERE name = 'keyed'`)

	if got := e.claim(t, nil, "w", "w", "w", "w", "w", "w", "w", "w", "w", "w"); len(got) != 5 {
		t.Fatalf("plain claim took %d jobs; want the 5 unlimited ones", len(got))
	}
	e.setQueue(t, "other", true, 0) // something configured: the claim by queue
	if got := e.claimQueues(t, nil, nil, 10); len(got) != 0 {
		t.Fatalf("claim by queue took %v; want nothing (only keyed jobs wait)", got)
	}
	if got := e.claimLimited(t, nil, 10); !counts(got, map[string]int{"keyed": 2}) {
		t.Fatalf("limited claim = %v; want 2 keyed jobs (the concurrency)", got)
	}
	if got := e.claimLimited(t, nil, 10); len(got) != 0 {
		t.Fatalf("limited claim at the limit = %v; want nothing", got)
	}
	e.completeOne(t, "keyed")
	if got := e.claimLimited(t, nil, 10); !counts(got, map[string]int{"keyed": 1}) {
		t.Fatalf("limited claim after one finished = %v; want 1", got)
	}
	// A key without a limit row runs unbounded (its limit may come later).
	e.insertKeyed(t, "free", "no-limit-yet", "", 4)
	if got := e.claimLimited(t, nil, 10); !counts(got, map[string]int{"free": 4}) {
		t.Fatalf("limited claim of a key with no limit = %v; want its 4 jobs", got)
	}
	// Raising the limit applies at the next claim.
	e.setLimit(t, "tenant-1", 4, 0, 0)
	if got := e.claimLimited(t, nil, 10); !counts(got, map[string]int{"keyed": 2}) {
		t.Fatalf("limited claim after raising the limit to 4 = %v; want 2 more", got)
	}
	var leased int
	e.scalar(t, &leased, `SELECT count(*) FROM jobs WHERE limit_key = 'tenant-1' AND status = 'leased'`)
	if leased != 4 {
		t.Fatalf("%d tenant-1 jobs leased; want 4", leased)
	}
}

// A rate: at most rate starts within any period, whatever finishes; the
// starts are counted from limit_starts, written by the claim itself; once
// the period has passed, rate more may start. Finished jobs free nothing.
func TestJobClaimLimitedRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setLimit(t, "api", 0, 3, time.Hour)
	e.insertKeyed(t, "call", "api", "", 10)
	if got := e.claimLimited(t, nil, 10); !counts(got, map[string]int{"call": 3}) {
		t.Fatalf("first claim = %v; want 3 (the rate)", got)
	}
	for range 3 {
		e.completeOne(t, "call")
	}
	if got := e.claimLimited(t, nil, 10); len(got) != 0 {
		t.Fatalf("claim within the period = %v; want nothing", got)
	}
	// Two of the starts leave the window: two more may start.
	e.exec(t, `UPDATE limit_starts SET at = at - interval '2 hours' WHERE ctid IN (SELECT ctid FROM limit_starts LIMIT 2)`)
	if got := e.claimLimited(t, nil, 10); !counts(got, map[string]int{"call": 2}) {
		t.Fatalf("claim after 2 starts aged out = %v; want 2", got)
	}
	var rows int
	e.scalar(t, &rows, `SELECT count(*) FROM limit_starts WHERE key = 'api'`)
	if rows != 3 {
		t.Fatalf("%d starts recorded; want 3 (the old ones deleted)", rows)
	}
	// Concurrency and rate together: the smaller room wins.
	e.setLimit(t, "both", 1, 5, time.Hour)
	e.insertKeyed(t, "both", "both", "", 5)
	if got := e.claimLimited(t, nil, 10); !counts(got, map[string]int{"both": 1}) {
		t.Fatalf("claim with concurrency 1, rate 5 = %v; want 1", got)
	}
	// Deleting a limit deletes its starts; its jobs then run unbounded.
	if err := e.s.LimitDelete(e.ctx, "api"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.LimitDelete(e.ctx, "api"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("second delete: %v; want job.ErrNotFound", err)
	}
	if got := e.claimLimited(t, nil, 10); !counts(got, map[string]int{"call": 5}) {
		t.Fatalf("claim after the limit was deleted = %v; want the 5 left", got)
	}
}

// A name limit applies to the jobs of that name submitted after it was
// set, not to those already waiting; a concurrency key wins over it.
func TestNameLimitAppliesAtSubmit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := e.insertKeyed(t, "report", "", "", 1)
	e.setLimit(t, "name:report", 1, 0, 0)
	after := e.insertKeyed(t, "report", "", "", 2)
	keyed := e.insertKeyed(t, "report", "tenant-9", "", 1)
	other := e.insertKeyed(t, "other", "", "", 1)
	for _, c := range []struct {
		id   int64
		want *string
	}{{before[0], nil}, {after[0], ptr("name:report")}, {after[1], ptr("name:report")}, {keyed[0], ptr("tenant-9")}, {other[0], nil}} {
		var got *string
		e.scalar(t, &got, `SELECT limit_key FROM jobs WHERE id = $1`, c.id)
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("job %d: limit_key %v, want %v", c.id, derefKey(got), derefKey(c.want))
		}
	}
	if got := e.get(t, after[0]).LimitKey; got != "name:report" {
		t.Errorf("JobGet: LimitKey %q, want name:report", got)
	}
	if got := e.get(t, before[0]).LimitKey; got != "" {
		t.Errorf("JobGet of an unlimited job: LimitKey %q, want none", got)
	}
	ls, err := e.s.LimitList(e.ctx)
	if err != nil || len(ls) != 1 || ls[0].Key != "name:report" || ls[0].Concurrency != 1 || ls[0].Waiting != 2 {
		t.Fatalf("limits = %+v, %v; want name:report with 2 waiting", ls, err)
	}
}

func ptr(s string) *string { return &s }

func derefKey(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// The limited claim honours queues: a paused queue's keyed jobs wait, a
// capped queue stays within its cap (counting its unlimited jobs too), and
// a group serving named queues gets only their jobs.
func TestJobClaimLimitedHonoursQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insertKeyed(t, "paused", "k", "held", 3)
	e.insertKeyed(t, "capped", "k", "reports", 5)
	e.insertKeyed(t, "free", "k", "default", 2)
	e.setQueue(t, "held", true, 0)
	e.setQueue(t, "reports", false, 3)
	e.insertQueue(t, "reports", 0, 1)
	if got := e.claimQueues(t, []string{"reports"}, nil, 1); len(got) != 1 {
		t.Fatalf("claim by queue = %v; want the unlimited reports job", got)
	}
	if got := e.claimLimited(t, []string{"reports", "held"}, 10); !counts(got, map[string]int{"capped": 2}) {
		t.Fatalf("limited claim for reports and held = %v; want 2 capped (3 minus 1 running)", got)
	}
	if got := e.claimLimited(t, nil, 10); !counts(got, map[string]int{"free": 2}) {
		t.Fatalf("limited claim for every queue = %v; want the 2 default ones", got)
	}
}

// The limited claim is fenced like every leader write.
func TestJobClaimLimitedFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insertKeyed(t, "k", "k", "", 3)
	if err := e.s.LeaderResign(e.ctx, e.epoch); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.LeaderAcquire(e.ctx, "successor", time.Hour); err != nil {
		t.Fatal(err)
	}
	_, err := e.s.JobClaimLimited(e.ctx, store.JobClaimLimitedParams{
		JobClaimParams: store.JobClaimParams{Epoch: e.epoch, Slots: []string{"w"}, Lease: time.Minute}})
	if !errors.Is(err, job.ErrDeposed) {
		t.Fatalf("claim of a deposed leader: %v; want job.ErrDeposed", err)
	}
	var leased int
	e.scalar(t, &leased, `SELECT count(*) FROM jobs WHERE status = 'leased'`)
	if leased != 0 {
		t.Fatalf("%d jobs leased by a deposed leader", leased)
	}
}

// An unlimited job costs the indexes it cost before limits: waiting, it is
// in the primary key, jobs_name_due_idx and jobs_queue_due_idx only;
// leased, in the primary key and jobs_leased_idx only. Each index's
// predicate is evaluated on the row itself. The plain claim's lock of one
// name's jobs reads jobs_name_due_idx in order.
func TestUnlimitedJobIndexEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setLimit(t, "name:limited", 1, 0, 0) // a limit exists, on another name
	id := e.insertN(t, 1, "plain", 1)[0]
	entries := func() []string {
		t.Helper()
		rows, err := e.db.Query(e.ctx, `SELECT c.relname, coalesce(pg_get_expr(i.indpred, i.indrelid), 'true')
			FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'jobs'::regclass`)
		if err != nil {
			t.Fatal(err)
		}
		type ix struct{ name, pred string }
		var ixs []ix
		for rows.Next() {
			var x ix
			if err := rows.Scan(&x.name, &x.pred); err != nil {
				t.Fatal(err)
			}
			ixs = append(ixs, x)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		var in []string
		for _, x := range ixs {
			var ok bool
			e.scalar(t, &ok, `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1 AND (`+x.pred+`))`, id)
			if ok {
				in = append(in, x.name)
			}
		}
		slices.Sort(in)
		return in
	}
	if got, want := entries(), []string{"jobs_name_due_idx", "jobs_pkey", "jobs_queue_due_idx"}; !slices.Equal(got, want) {
		t.Errorf("a waiting unlimited job is in %v; want %v", got, want)
	}
	e.claimOne(t, id, "w")
	if got, want := entries(), []string{"jobs_leased_idx", "jobs_pkey"}; !slices.Equal(got, want) {
		t.Errorf("a leased unlimited job is in %v; want %v", got, want)
	}

	tx, err := e.db.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	if _, err := tx.Exec(e.ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	var plan string
	if err := tx.QueryRow(e.ctx, `EXPLAIN (FORMAT JSON) SELECT j.id FROM jobs j
		WHERE j.status IN ('pending', 'retrying') AND j.limit_key IS NULL AND j.next_run_at <= now()
		  AND j.name = $1
		ORDER BY j.priority DESC, j.next_run_at, j.id LIMIT 10 FOR UPDATE SKIP LOCKED`, "plain").Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, `"Index Name": "jobs_name_due_idx"`) || strings.Contains(plan, "Sort") {
		t.Errorf("the plain claim's lock does not read jobs_name_due_idx in order:\n%s", plan)
	}
}

// Neither claim walks a backlog it may not take: 20,000 keyed jobs at
// their limit, ahead of everything by priority, cost the plain claim and
// the limited claim a few rows each (generic plans, as the coordinator's
// sessions use).
func TestClaimsSkipFullKeysBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, `INSERT INTO jobs (name, priority, limit_key) SELECT 'k', 9, 'full' FROM generate_series(1, 20000)`)
	e.setLimit(t, "full", 1, 0, 0)
	e.exec(t, `UPDATE jobs SET status = 'leased', lease_token = 1, worker_id = 'x', lease_expires_at = now() + interval '1 hour'
		WHERE id = (SELECT min(id) FROM jobs)`)
	e.insertKeyed(t, "open", "open", "", 3)
	e.insertN(t, 3, "plain", 1)
	e.exec(t, `ANALYZE jobs`)
	conn, err := pgx.Connect(e.ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(e.ctx)
	if _, err := conn.Exec(e.ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what, sql string
	}{
		{"plain claim", `SELECT count(*) FROM dts_claim_jobs($1, NULL, $2, $3, 10000)`},
		{"limited claim", `SELECT count(*) FROM dts_claim_limited_jobs($1, NULL, NULL, $2, $3, 10000)`},
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
			t.Errorf("%s past a full key's 20,000 jobs: leased %d, %d sequential scans, %d rows fetched; want 3, 0, a few",
				c.what, n, seq, read)
		}
	}
}
