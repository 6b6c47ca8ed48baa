package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
)

// TestStoreSurvivesHungPrimary freezes a server that pgx may still be
// dialling to cancel a query when the tests end (IgnoreAsyncCancel).
func TestMain(m *testing.M) { pgtest.Main(m, pgtest.IgnoreAsyncCancel) }

// env is one test's database: the store under test and a plain pool for
// the SQL a test uses to inspect rows or move the clock of a row (lease
// deadlines, finished_at) into the past.
type env struct {
	ctx context.Context
	s   *store.Store
	db  *pgxpool.Pool
	url string
	// epoch is the leadership the test's store writes under (every
	// leader write carries it: dts_fence).
	epoch int64
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := t.Context()
	s, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(s.Close)
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(db.Close)
	epoch, err := s.LeaderAcquire(ctx, "test", time.Hour)
	if err != nil || epoch == 0 {
		t.Fatalf("acquire leadership: %d, %v", epoch, err)
	}
	return &env{ctx: ctx, s: s, db: db, url: url, epoch: epoch}
}

// exec runs one SQL statement and returns the rows it affected.
func (e *env) exec(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	tag, err := e.db.Exec(e.ctx, sql, args...)
	if err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
	return tag.RowsAffected()
}

// scalar runs a query returning one value into dst.
func (e *env) scalar(t *testing.T, dst any, sql string, args ...any) {
	t.Helper()
	if err := e.db.QueryRow(e.ctx, sql, args...).Scan(dst); err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
}

// ids runs a query returning one bigint column and returns its values.
func (e *env) ids(t *testing.T, sql string, args ...any) []int64 {
	t.Helper()
	rows, err := e.db.Query(e.ctx, sql, args...)
	if err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	return out
}

// now is PostgreSQL's clock, the one every deadline is computed with.
func (e *env) now(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	e.scalar(t, &now, `SELECT clock_timestamp()`)
	return now
}

// insert creates jobs and returns their ids in input order.
func (e *env) insert(t *testing.T, ps ...store.JobInsertParams) []int64 {
	t.Helper()
	res, err := e.s.JobInsert(e.ctx, ps)
	if err != nil {
		t.Fatalf("insert %d jobs: %v", len(ps), err)
	}
	if len(res) != len(ps) {
		t.Fatalf("insert %d jobs: got %d results", len(ps), len(res))
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

// insertN creates n jobs named name with max_retries retries.
func (e *env) insertN(t *testing.T, n int, name string, maxRetries int) []int64 {
	t.Helper()
	ps := make([]store.JobInsertParams, n)
	for i := range ps {
		ps[i] = store.JobInsertParams{Name: name, MaxRetries: maxRetries, Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
	}
	return e.insert(t, ps...)
}

// claim leases up to len(slots) due jobs with a one-minute lease and
// returns them by id.
func (e *env) claim(t *testing.T, types []string, slots ...string) map[int64]store.Claimed {
	t.Helper()
	cs, err := e.s.JobClaimBatch(e.ctx, store.JobClaimParams{Epoch: e.epoch, Types: types, Slots: slots, Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	out := make(map[int64]store.Claimed, len(cs))
	for _, c := range cs {
		if _, dup := out[c.ID]; dup {
			t.Fatalf("claim returned job %d twice", c.ID)
		}
		out[c.ID] = c
	}
	return out
}

// claimOne leases the one job expected to be due and fails if it is not id.
func (e *env) claimOne(t *testing.T, id int64, worker string) store.Claimed {
	t.Helper()
	got := e.claim(t, nil, worker)
	c, ok := got[id]
	if !ok || len(got) != 1 {
		t.Fatalf("claim: got %v, want only job %d", keys(got), id)
	}
	return c
}

func (e *env) get(t *testing.T, id int64) *job.Job {
	t.Helper()
	j, err := e.s.JobGet(e.ctx, id)
	if err != nil {
		t.Fatalf("get job %d: %v", id, err)
	}
	return j
}

// makeDue moves a job's next_run_at to now, as if its backoff had elapsed.
func (e *env) makeDue(t *testing.T, id int64) {
	t.Helper()
	if n := e.exec(t, `UPDATE jobs SET next_run_at = now() WHERE id = $1`, id); n != 1 {
		t.Fatalf("make job %d due: %d rows", id, n)
	}
}

func (e *env) fail(t *testing.T, policy store.RetryPolicy, fs ...store.Failure) map[int64]store.FailOutcome {
	t.Helper()
	out, err := e.s.JobFailMany(e.ctx, e.epoch, fs, policy)
	if err != nil {
		t.Fatalf("fail: %v", err)
	}
	m := map[int64]store.FailOutcome{}
	for _, o := range out {
		m[o.ID] = o
	}
	return m
}

func keys[V any](m map[int64]V) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// fixedPolicy retries after d whatever the attempt.
func fixedPolicy(d time.Duration) store.RetryPolicy {
	return func(int) time.Duration { return d }
}

// noRetryPolicy fails the test if a retry delay is asked for.
func noRetryPolicy(t *testing.T) store.RetryPolicy {
	return func(attempt int) time.Duration {
		t.Errorf("retry policy called for attempt %d; no backoff was expected", attempt)
		return 0
	}
}

// jsonEqual reports whether two JSON texts hold the same value (jsonb
// normalises spacing and key order).
func jsonEqual(t *testing.T, got, want []byte) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("decode %q: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("decode %q: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

// within fails unless got is within tol of want.
func within(t *testing.T, what string, got, want time.Time, tol time.Duration) {
	t.Helper()
	if d := got.Sub(want); d < -tol || d > tol {
		t.Errorf("%s = %v, want %v ± %v (off by %v)", what, got, want, tol, d)
	}
}
