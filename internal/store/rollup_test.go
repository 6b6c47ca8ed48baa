package store_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// place moves a job into status with its times at offsets from minute
// (started and finished nil: left NULL).
func (e *env) place(t *testing.T, id int64, status string, minute time.Time, created time.Duration, started, finished *time.Duration) {
	t.Helper()
	at := func(d *time.Duration) *time.Time {
		if d == nil {
			return nil
		}
		v := minute.Add(*d)
		return &v
	}
	var token *int64
	if status == "leased" {
		v := id
		token = &v
	}
	if n := e.exec(t, `UPDATE jobs SET status = $2, created_at = $3, started_at = $4, finished_at = $5, lease_token = $6
		WHERE id = $1`, id, status, minute.Add(created), at(started), at(finished), token); n != 1 {
		t.Fatalf("place job %d: %d rows", id, n)
	}
}

func dur(d time.Duration) *time.Duration { return &d }

// TestRollupWrite: the rows of a minute are right for known completions,
// failures, starts and due jobs, per name and in total; a minute is
// written once; a deposed leader writes nothing; old rows go.
func TestRollupWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := e.now(t)
	m := now.Truncate(time.Minute).Add(-5 * time.Minute)
	s := time.Second
	ms := time.Millisecond

	// a: three completed in m, submit->start 100, 200, 300 ms; one failed,
	// 1000 ms.
	a := e.insertN(t, 4, "a", 0)
	for i, lat := range []time.Duration{100 * ms, 200 * ms, 300 * ms} {
		e.place(t, a[i], "completed", m, 5*s-lat, dur(5*s), dur(10*s))
	}
	e.place(t, a[3], "failed", m, 40*s-1000*ms, dur(40*s), dur(50*s))
	// b: two completed in m but started the minute before; one completed
	// in the next minute.
	b := e.insertN(t, 3, "b", 0)
	e.place(t, b[0], "completed", m, -40*s, dur(-30*s), dur(20*s))
	e.place(t, b[1], "completed", m, -40*s, dur(-30*s), dur(20*s))
	e.place(t, b[2], "completed", m, 62*s, dur(65*s), dur(70*s))
	// c: leased, started in m after 400 ms; f: canceled while running,
	// started in m after 50 ms.
	c := e.insertN(t, 1, "c", 0)
	e.place(t, c[0], "leased", m, 30*s-400*ms, dur(30*s), nil)
	f := e.insertN(t, 1, "f", 0)
	e.place(t, f[0], "canceled", m, 10*s-50*ms, dur(10*s), dur(12*s))
	// g: canceled in m while running since the minute before: no row.
	g := e.insertN(t, 1, "g", 0)
	e.place(t, g[0], "canceled", m, -20*s, dur(-10*s), dur(12*s))
	// d: two due, the oldest for 90 s; e: one not due yet.
	d := e.insertN(t, 2, "d", 0)
	e.exec(t, `UPDATE jobs SET next_run_at = now() - interval '90 seconds' WHERE id = $1`, d[0])
	e.exec(t, `UPDATE jobs SET next_run_at = now() - interval '10 seconds' WHERE id = $1`, d[1])
	late := e.insertN(t, 1, "e", 0)
	e.exec(t, `UPDATE jobs SET next_run_at = now() + interval '1 hour' WHERE id = $1`, late[0])

	n, err := e.s.RollupWrite(e.ctx, e.epoch, m.Add(17*s)) // truncated to m
	if err != nil || n != 6 {
		t.Fatalf("write: %d rows, %v; want 6 (total, a, b, c, d, f)", n, err)
	}
	rows, err := e.s.RollupRange(e.ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]store.RollupRow{}
	for _, r := range rows {
		if !r.Minute.Equal(m) {
			t.Errorf("row of %s, want %s", r.Minute, m)
		}
		got[r.Name] = r
	}
	p := func(v float64) *float64 { return &v }
	for name, want := range map[string]store.RollupRow{
		"":  {Completed: 5, Failed: 1, Started: 6, StartP50: p(250), StartP95: p(850), QueueDepth: 2, OldestPending: 90},
		"a": {Completed: 3, Failed: 1, Started: 4, StartP50: p(250), StartP95: p(895)},
		"b": {Completed: 2},
		"c": {Started: 1, StartP50: p(400), StartP95: p(400)},
		"d": {QueueDepth: 2, OldestPending: 90},
		"f": {Started: 1, StartP50: p(50), StartP95: p(50)},
	} {
		r, ok := got[name]
		if !ok {
			t.Errorf("no row for %q", name)
			continue
		}
		if r.Completed != want.Completed || r.Failed != want.Failed || r.Started != want.Started || r.QueueDepth != want.QueueDepth ||
			!nearRel(r.StartP50, want.StartP50, 0.005) || !nearRel(r.StartP95, want.StartP95, 0.005) ||
			!near(&r.OldestPending, &want.OldestPending, 5) {
			t.Errorf("%q: got %+v p50 %v p95 %v, want %+v p50 %v p95 %v", name, r, deref(r.StartP50), deref(r.StartP95),
				want, deref(want.StartP50), deref(want.StartP95))
		}
	}
	if len(got) != 6 {
		t.Errorf("%d rows, want 6: %v", len(got), got)
	}

	// Written once: a second write of m keeps the rows as they were.
	e.place(t, b[2], "completed", m, 50*s, dur(52*s), dur(58*s))
	if n, err := e.s.RollupWrite(e.ctx, e.epoch, m); err != nil || n != 0 {
		t.Errorf("second write of the minute: %d rows, %v; want 0", n, err)
	}
	var completed int64
	e.scalar(t, &completed, `SELECT completed FROM job_rollup WHERE minute = $1 AND name = 'b'`, m)
	if completed != 2 {
		t.Errorf("b's row changed to %d completed", completed)
	}

	// A minute without events still has its total row, and the due jobs
	// of the time of writing (d's).
	empty := m.Add(-time.Hour)
	if n, err := e.s.RollupWrite(e.ctx, e.epoch, empty); err != nil || n != 2 {
		t.Errorf("empty minute: %d rows, %v; want the total and d", n, err)
	}

	// A deposed leader writes and deletes nothing.
	if err := e.s.LeaderResign(e.ctx, e.epoch); err != nil {
		t.Fatal(err)
	}
	if epoch, err := e.s.LeaderAcquire(e.ctx, "coord-b", time.Minute); err != nil || epoch != e.epoch+1 {
		t.Fatalf("take over: %d %v", epoch, err)
	}
	if _, err := e.s.RollupWrite(e.ctx, e.epoch, m.Add(-time.Minute)); !errors.Is(err, job.ErrDeposed) {
		t.Errorf("deposed write: %v, want ErrDeposed", err)
	}
	if _, err := e.s.RollupCleanup(e.ctx, e.epoch, time.Minute); !errors.Is(err, job.ErrDeposed) {
		t.Errorf("deposed cleanup: %v, want ErrDeposed", err)
	}
	var total int64
	e.scalar(t, &total, `SELECT count(*) FROM job_rollup`)
	if total != 8 {
		t.Errorf("%d rows after the deposed leader's writes, want 8", total)
	}

	// Retention: rows older than the age go, the others stay.
	if n, err := e.s.RollupCleanup(e.ctx, e.epoch+1, 30*time.Minute); err != nil || n != 2 {
		t.Errorf("cleanup: %d rows, %v; want the hour-old minute's 2", n, err)
	}
}

// TestRollupPercentilesMatchPostgres: the percentiles the rollup takes
// from its buckets are within 0.5 % of PostgreSQL's exact
// percentile_cont over the same jobs, for waits from half a millisecond
// to 20 s, per name and in total.
func TestRollupPercentilesMatchPostgres(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.now(t).Truncate(time.Minute).Add(-2 * time.Minute)
	e.insertN(t, 400, "r", 0)
	e.insertN(t, 7, "q", 0)
	// Every job starts 10 s into m after a wait of 0.5 ms to 20 s,
	// spread evenly on a log scale (setseed: the same waits every run).
	e.exec(t, `SELECT setseed(0.42)`)
	e.exec(t, `UPDATE jobs SET status = 'completed',
		created_at = $1::timestamptz + interval '10 seconds' - exp(random() * ln(40000)) * 0.5 * interval '1 millisecond',
		started_at = $1::timestamptz + interval '10 seconds', finished_at = $1::timestamptz + interval '11 seconds'`, m)
	if n, err := e.s.RollupWrite(e.ctx, e.epoch, m); err != nil || n != 3 {
		t.Fatalf("write: %d rows, %v; want 3", n, err)
	}
	for _, name := range []string{"", "r", "q"} {
		var got, want [2]*float64
		e.scalar(t, &got, `SELECT ARRAY[start_p50_ms, start_p95_ms] FROM job_rollup WHERE minute = $1 AND name = $2`, m, name)
		e.scalar(t, &want, `SELECT ARRAY[percentile_cont(0.5) WITHIN GROUP (ORDER BY w), percentile_cont(0.95) WITHIN GROUP (ORDER BY w)]
			FROM (SELECT date_part('epoch', started_at - created_at) * 1000 AS w FROM jobs WHERE $1 = '' OR name = $1) j`, name)
		for i := range got {
			if !nearRel(got[i], want[i], 0.005) {
				t.Errorf("%q: percentile %d is %v, PostgreSQL's %v", name, i, deref(got[i]), deref(want[i]))
			}
		}
	}
}

// TestRollupNamesBounded: a minute keeps rows for the busiest
// MaxRollupNames names; every name counts in the total.
func TestRollupNamesBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.now(t).Truncate(time.Minute).Add(-2 * time.Minute)
	names := store.MaxRollupNames + 5
	for i := range names {
		ids := e.insertN(t, 1, fmt.Sprintf("n%03d", i), 0)
		e.place(t, ids[0], "completed", m, 0, dur(time.Second), dur(2*time.Second))
	}
	busy := e.insertN(t, 3, "zz-busy", 0)
	for _, id := range busy {
		e.place(t, id, "completed", m, 0, dur(time.Second), dur(2*time.Second))
	}
	if n, err := e.s.RollupWrite(e.ctx, e.epoch, m); err != nil || n != store.MaxRollupNames+1 {
		t.Fatalf("write: %d rows, %v; want %d", n, err, store.MaxRollupNames+1)
	}
	var total, busyN int64
	e.scalar(t, &total, `SELECT completed FROM job_rollup WHERE name = ''`)
	e.scalar(t, &busyN, `SELECT completed FROM job_rollup WHERE name = 'zz-busy'`)
	if total != int64(names+3) || busyN != 3 {
		t.Errorf("total %d (want %d), zz-busy %d (want 3)", total, names+3, busyN)
	}
}

func near(got, want *float64, tol float64) bool {
	if got == nil || want == nil {
		return got == nil && want == nil
	}
	return math.Abs(*got-*want) <= tol
}

// nearRel: got is within the fraction tol of want (the rollup's
// percentiles come from buckets 1 % wide).
func nearRel(got, want *float64, tol float64) bool {
	if got == nil || want == nil {
		return got == nil && want == nil
	}
	return math.Abs(*got-*want) <= tol**want
}

func deref(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}
