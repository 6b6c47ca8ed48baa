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

// TestJobBulkCancelWaiting: a cancel of many jobs cancels waiting ones (a
// dependency not yet done) as JobCancel does one, their dependents in
// turn, in the request's form and as a background operation.
func TestJobBulkCancelWaiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cancelStates := []job.State{job.StateWaiting, job.StatePending, job.StateRetrying, job.StateLeased}
	// parent (pending) <- child (waiting) <- grandchild (waiting), for each
	// of the two forms.
	family := func(name string) (parent, child, grandchild int64) {
		ids := e.insert(t, store.JobInsertParams{Name: "parent"},
			store.JobInsertParams{Name: name, DependsOnIndex: []int{0}},
			store.JobInsertParams{Name: "grandchild", DependsOnIndex: []int{1}})
		if st := e.get(t, ids[1]).State; st != job.StateWaiting {
			t.Fatalf("child is %s, want waiting", st)
		}
		return ids[0], ids[1], ids[2]
	}
	check := func(form string, parent, child, grandchild int64) {
		t.Helper()
		if st := e.get(t, parent).State; st != job.StatePending {
			t.Errorf("%s: parent is %s, want pending (not selected)", form, st)
		}
		if j := e.get(t, child); j.State != job.StateCanceled || !j.CancelRequest {
			t.Errorf("%s: waiting child is %s (cancel requested %v), want canceled", form, j.State, j.CancelRequest)
		}
		if j := e.get(t, grandchild); j.State != job.StateCanceled {
			t.Errorf("%s: grandchild is %s, want canceled with its parent", form, j.State)
		}
	}

	p, c, g := family("child")
	f := store.JobBulkParams{States: cancelStates, Name: "child"}
	if n, err := e.s.JobBulkCount(e.ctx, f, true); err != nil || n != 1 {
		t.Errorf("count = %d, %v; want the waiting child", n, err)
	}
	if n, leased, err := e.s.JobBulkCancel(e.ctx, f); err != nil || n != 1 || len(leased) != 0 {
		t.Errorf("bulk cancel = %d %+v %v; want 1, none leased", n, leased, err)
	}
	check("bulk", p, c, g)

	p, c, g = family("child_op")
	op := newOp(t, e, "cancel", store.OperationFilter{States: cancelStates, Name: "child_op"}, "s1")
	if op.Matched != 1 {
		t.Errorf("operation matched %d, want the waiting child", op.Matched)
	}
	if got, _ := runOp(t, e, op.ID, "s1", 10); got.State != store.OperationDone || got.Affected != 1 {
		t.Errorf("operation ended %s with %d affected, want done with 1", got.State, got.Affected)
	}
	check("operation", p, c, g)
}
