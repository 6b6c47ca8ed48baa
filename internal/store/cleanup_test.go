package store_test

import (
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
)

// TestJobCleanupRacesRequeue checks that retention never deletes a job
// that a requeue made live while the cleanup waited for its row: the
// DELETE re-checks the row it gets (status and age), not only the ids it
// picked from its snapshot. The requeue answered ok; deleting the job
// would lose it.
func TestJobCleanupRacesRequeue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 2, "dead", 0)
	requeued, other := ids[0], ids[1]
	e.exec(t, `UPDATE jobs SET status = 'failed', dead_reason = 'permanent', finished_at = now() - interval '48 hours'
		WHERE id = ANY($1)`, ids)

	// JobRequeueDead's change, held uncommitted so that the cleanup meets
	// the row locked.
	tx, err := e.db.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(e.ctx)
	if tag, err := tx.Exec(e.ctx, `UPDATE jobs SET status = 'pending', attempts = 0, next_run_at = now(),
		finished_at = NULL, dead_reason = NULL, cancel_requested = false, error_fingerprint = NULL
		WHERE id = $1 AND status = 'failed'`, requeued); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("requeue: %v, %d rows", err, tag.RowsAffected())
	}

	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := e.s.JobCleanup(e.ctx, e.epoch, time.Hour, 24*time.Hour, 100)
		done <- result{n, err}
	}()
	waitLockWait(t, e, "DELETE FROM jobs")
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("cleanup: %v", r.err)
	}
	if r.n != 1 {
		t.Errorf("cleanup deleted %d jobs, want 1 (the other dead job)", r.n)
	}
	var left int
	e.scalar(t, &left, `SELECT count(*) FROM jobs WHERE id = $1`, other)
	if left != 0 {
		t.Errorf("the untouched dead job %d is still there", other)
	}
	var n int
	e.scalar(t, &n, `SELECT count(*) FROM jobs WHERE id = $1`, requeued)
	if n != 1 {
		t.Fatalf("the requeued job %d was deleted by retention", requeued)
	}
	if j := e.get(t, requeued); j.State != job.StatePending {
		t.Errorf("requeued job is %s, want pending", j.State)
	}
}
