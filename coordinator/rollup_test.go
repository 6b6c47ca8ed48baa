package coordinator

import (
	"testing"
	"time"

	"github.com/dtsched/dts/internal/testwait"
)

// TestMaintenanceWritesRollup: the running maintenance service writes the
// rollup of the minute that ended, with the jobs finished in it; after
// another coordinator took the lead, its write is refused whole and the
// service stops (it deposes its leader).
func TestMaintenanceWritesRollup(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var last time.Time
	if err := r.db.QueryRow(r.ctx, `SELECT date_trunc('minute', now() - interval '5 seconds') - interval '1 minute'`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	// The same jobs in the next minute too, in case it ends before the
	// service's first write.
	if _, err := r.db.Exec(r.ctx, `INSERT INTO jobs (name, status, attempts, created_at, started_at, finished_at)
		SELECT 'report', CASE WHEN i <= 3 THEN 'completed' ELSE 'failed' END, 1, m, m + interval '2 seconds', m + interval '3 seconds'
		FROM generate_series(1, 5) AS i, (VALUES ($1::timestamptz), ($1 + interval '1 minute')) AS t(m)`, last); err != nil {
		t.Fatal(err)
	}
	m := &maintainer{base: r.b, store: r.store, queue: r.queue}
	r.start(m)
	var completed, failed int64
	testwait.For(t, 10*time.Second, "the rollup of the last minute", func() bool {
		err := r.db.QueryRow(r.ctx, `SELECT completed, failed, minute FROM job_rollup WHERE minute >= $1 AND name = 'report'`, last).
			Scan(&completed, &failed, &last)
		return err == nil
	})
	if completed != 3 || failed != 2 {
		t.Errorf("report's row: %d completed, %d failed; want 3 and 2", completed, failed)
	}
	m.Stop()

	// Another coordinator takes over; the old leader's next minute is refused.
	if err := r.store.LeaderResign(r.ctx, r.b.l.epoch); err != nil {
		t.Fatal(err)
	}
	if epoch, err := r.store.LeaderAcquire(r.ctx, "other", time.Hour); err != nil || epoch == 0 {
		t.Fatalf("take over: %d %v", epoch, err)
	}
	var before int64
	_ = r.db.QueryRow(r.ctx, `SELECT count(*) FROM job_rollup`).Scan(&before)
	next := last.Add(2*time.Minute + rollupDelay)
	if got := m.rollup(r.ctx, next, last.Add(time.Minute)); !got.Equal(last.Add(time.Minute)) {
		t.Errorf("a refused write moved the last written minute to %s", got)
	}
	var after int64
	_ = r.db.QueryRow(r.ctx, `SELECT count(*) FROM job_rollup`).Scan(&after)
	if after != before {
		t.Errorf("the deposed leader wrote %d rollup rows", after-before)
	}
	select {
	case <-r.b.l.deposed:
	default:
		t.Error("the refused write did not depose the leader")
	}
}
