package store_test

import (
	"errors"
	"testing"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// TestJobBulk: each action changes exactly the jobs its filters select in
// the states it applies to, across several batches, and the count says
// beforehand how many that is.
func TestJobBulk(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.insertN(t, 7, "a", 3)
	b := e.insertN(t, 2, "b", 3)
	e.claimOne(t, a[0], "w1")
	e.exec(t, `UPDATE jobs SET status = 'failed', finished_at = now() WHERE id = ANY($1)`, []int64{a[5], a[6], b[1]})

	live := store.JobBulkParams{States: []job.State{job.StatePending, job.StateRetrying, job.StateLeased}, Name: "a", Batch: 2}
	if n, err := e.s.JobBulkCount(e.ctx, live, true); err != nil || n != 5 {
		t.Fatalf("count live a = %d, %v; want 5", n, err)
	}
	n, leased, err := e.s.JobBulkCancel(e.ctx, live)
	if err != nil || n != 5 || len(leased) != 1 || leased[0].JobID != a[0] || leased[0].WorkerID != "w1" {
		t.Fatalf("cancel = %d %+v %v; want 5 with job %d leased by w1", n, leased, err, a[0])
	}
	if n, _ := e.s.JobBulkCount(e.ctx, live, true); n != 0 {
		t.Errorf("after cancel, %d live a jobs counted; want 0 (the leased one has its cancel requested)", n)
	}
	if e.get(t, b[0]).State != job.StatePending {
		t.Errorf("job b pending was touched by a cancel of name a")
	}

	failed := store.JobBulkParams{States: []job.State{job.StateFailed}, Batch: 1}
	if n, err := e.s.JobBulkRequeue(e.ctx, failed); err != nil || n != 3 {
		t.Fatalf("requeue = %d, %v; want 3", n, err)
	}
	if j := e.get(t, b[1]); j.State != job.StatePending || j.Attempts != 0 {
		t.Errorf("requeued job = %s, %d attempts", j.State, j.Attempts)
	}

	final := store.JobBulkParams{States: []job.State{job.StateCompleted, job.StateFailed, job.StateCanceled}}
	if n, err := e.s.JobBulkDelete(e.ctx, final); err != nil || n != 4 {
		t.Fatalf("delete = %d, %v; want the 4 canceled jobs", n, err)
	}
	if _, err := e.s.JobGet(e.ctx, a[1]); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("deleted job still there: %v", err)
	}
}

func TestJobDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 2, "x", 0)
	if _, err := e.s.JobDelete(e.ctx, ids[0]); !errors.Is(err, job.ErrConflict) {
		t.Errorf("delete pending job: %v, want ErrConflict", err)
	}
	e.exec(t, `UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = $1`, ids[0])
	if st, err := e.s.JobDelete(e.ctx, ids[0]); err != nil || st != job.StateCompleted {
		t.Errorf("delete completed job = %s, %v", st, err)
	}
	if _, err := e.s.JobDelete(e.ctx, ids[0]); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("delete again: %v, want ErrNotFound", err)
	}
}
