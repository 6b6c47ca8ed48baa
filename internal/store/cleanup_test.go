package store_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
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

// TestJobCleanupKeepsParentsOfWaitingCallback: retention does not delete a
// finished job while a batch callback that waits on it has not fired, so
// the callback's payload lists every job of its batch; once it has fired,
// the job goes like any other.
func TestJobCleanupKeepsParentsOfWaitingCallback(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insert(t, store.JobInsertParams{Name: "a"}, store.JobInsertParams{Name: "b"},
		store.JobInsertParams{Name: "cb", Callback: true})
	a, b, cb := ids[0], ids[1], ids[2]
	// a finished long ago; b still runs, so the callback waits.
	e.exec(t, `UPDATE jobs SET status = 'completed', result = '"done a"', finished_at = now() - interval '48 hours' WHERE id = $1`, a)
	e.exec(t, `UPDATE jobs SET status = 'leased', lease_token = 1, worker_id = 'w' WHERE id = $1`, b)
	if st := e.get(t, cb).State; st != job.StateWaiting {
		t.Fatalf("callback is %s, want waiting", st)
	}
	if n, err := e.s.JobCleanup(e.ctx, e.epoch, time.Hour, time.Hour, 100); err != nil || n != 0 {
		t.Errorf("cleanup while the callback waits deleted %d, %v; want 0", n, err)
	}
	e.exec(t, `UPDATE jobs SET status = 'completed', result = '"done b"', finished_at = now(), lease_token = NULL WHERE id = $1`, b)
	j := e.get(t, cb)
	if j.State != job.StatePending {
		t.Fatalf("callback is %s, want pending", j.State)
	}
	var payload struct {
		Jobs []struct {
			JobID  string          `json:"job_id"`
			Status string          `json:"status"`
			Result json.RawMessage `json:"result"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(j.Payload, &payload); err != nil {
		t.Fatal(err)
	}
	if len(payload.Jobs) != 2 || payload.Jobs[0].JobID != strconv.FormatInt(a, 10) || string(payload.Jobs[0].Result) != `"done a"` {
		t.Errorf("callback payload %s, want the outcomes of jobs %d and %d", j.Payload, a, b)
	}
	// The callback has fired: a is only an old finished job now.
	if n, err := e.s.JobCleanup(e.ctx, e.epoch, time.Hour, time.Hour, 100); err != nil || n != 1 {
		t.Errorf("cleanup after the callback fired deleted %d, %v; want job %d", n, err, a)
	}
}
