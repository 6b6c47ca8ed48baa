package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// complete leases the one due job, which must be id, and completes it.
func (e *env) complete(t *testing.T, id int64, result string) {
	t.Helper()
	c := e.claimOne(t, id, "w1")
	done, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{{ID: id, LeaseToken: c.LeaseToken,
		WorkerID: "w1", Result: json.RawMessage(result)}})
	if err != nil || len(done) != 1 {
		t.Fatalf("complete job %d: %v, %d applied", id, err, len(done))
	}
}

// failFor leases the one due job, which must be id, and fails it for good.
func (e *env) failFor(t *testing.T, id int64) {
	t.Helper()
	c := e.claimOne(t, id, "w1")
	out := e.fail(t, noRetryPolicy(t), store.Failure{ID: id, LeaseToken: c.LeaseToken, WorkerID: "w1",
		Error: "boom", Reason: job.ReasonPermanent, Permanent: true})
	if out[id].State != job.StateFailed {
		t.Fatalf("fail job %d: %+v", id, out)
	}
}

func (e *env) insertRes(t *testing.T, ps ...store.JobInsertParams) []store.JobInsertResult {
	t.Helper()
	res, err := e.s.JobInsert(e.ctx, ps)
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	return res
}

func (e *env) wantState(t *testing.T, id int64, want job.State) *job.Job {
	t.Helper()
	j := e.get(t, id)
	if j.State != want {
		t.Fatalf("job %d is %s, want %s (last_error %q)", id, j.State, want, j.LastError)
	}
	return j
}

func TestDependencyReleasedOnCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.insert(t, store.JobInsertParams{Name: "a"})[0]
	res := e.insertRes(t, store.JobInsertParams{Name: "b", DependsOn: []int64{a}})
	b := res[0].ID
	if res[0].State != job.StateWaiting {
		t.Fatalf("b inserted %s, want waiting", res[0].State)
	}
	e.complete(t, a, `1`) // the claim sees a only: b is waiting
	e.wantState(t, b, job.StatePending)
	e.complete(t, b, `2`)
}

func TestDependencyMultiParent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insert(t, store.JobInsertParams{Name: "a"}, store.JobInsertParams{Name: "b"})
	c := e.insert(t, store.JobInsertParams{Name: "c", DependsOn: []int64{ids[1], ids[0], ids[0]}})[0]
	var edges int
	e.scalar(t, &edges, `SELECT count(*) FROM job_dependencies WHERE child = $1`, c)
	if edges != 2 {
		t.Errorf("%d edges, want 2", edges)
	}
	e.complete(t, ids[0], `null`)
	e.wantState(t, c, job.StateWaiting)
	e.complete(t, ids[1], `null`)
	e.wantState(t, c, job.StatePending)
}

func TestDependencyCascadeOnFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.insert(t, store.JobInsertParams{Name: "a", MaxRetries: 0})[0]
	// b after a, c after b (by index in the same batch), d after c.
	res := e.insertRes(t, store.JobInsertParams{Name: "b", DependsOn: []int64{a}},
		store.JobInsertParams{Name: "c", DependsOnIndex: []int{0}})
	b, c := res[0].ID, res[1].ID
	d := e.insert(t, store.JobInsertParams{Name: "d", DependsOn: []int64{c}})[0]
	e.failFor(t, a)
	jb := e.wantState(t, b, job.StateCanceled)
	if want := fmt.Sprintf("parent job %d failed", a); jb.LastError != want {
		t.Errorf("b last_error %q, want %q", jb.LastError, want)
	}
	for _, id := range []int64{c, d} {
		if j := e.wantState(t, id, job.StateCanceled); j.FinishedAt == nil {
			t.Errorf("job %d canceled without finished_at", id)
		}
	}
	var why string
	e.scalar(t, &why, `SELECT dead_reason FROM jobs WHERE id = $1`, b)
	if why != job.ReasonDependencyFailed {
		t.Errorf("b dead_reason %q", why)
	}
	e.scalar(t, &why, `SELECT dead_reason || ' ' || last_error FROM jobs WHERE id = $1`, d)
	if want := fmt.Sprintf("%s parent job %d was canceled", job.ReasonDependencyCanceled, c); why != want {
		t.Errorf("d: %q, want %q", why, want)
	}
	// Nothing of the chain is due.
	if got := e.claim(t, nil, "w1", "w2"); len(got) != 0 {
		t.Errorf("claimed %v", keys(got))
	}
}

func TestDependencyCascadeOnCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.insert(t, store.JobInsertParams{Name: "a"})[0]
	b := e.insert(t, store.JobInsertParams{Name: "b", DependsOn: []int64{a}})[0]
	c := e.insert(t, store.JobInsertParams{Name: "c", DependsOn: []int64{b}})[0]
	// Cancelling a waiting job cascades too.
	if _, err := e.s.JobCancel(e.ctx, b); err != nil {
		t.Fatal(err)
	}
	e.wantState(t, b, job.StateCanceled)
	e.wantState(t, c, job.StateCanceled)
	e.wantState(t, a, job.StatePending)

	x := e.insert(t, store.JobInsertParams{Name: "x"})[0]
	y := e.insert(t, store.JobInsertParams{Name: "y", DependsOn: []int64{x, a}})[0]
	if _, err := e.s.JobCancel(e.ctx, x); err != nil {
		t.Fatal(err)
	}
	if j := e.wantState(t, y, job.StateCanceled); j.LastError != fmt.Sprintf("parent job %d was canceled", x) {
		t.Errorf("y last_error %q", j.LastError)
	}
}

func TestDependencyOnFinishedParents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insert(t, store.JobInsertParams{Name: "a"}, store.JobInsertParams{Name: "b", MaxRetries: 0})
	e.complete(t, ids[0], `1`)
	e.failFor(t, ids[1])
	res := e.insertRes(t, store.JobInsertParams{Name: "c", DependsOn: []int64{ids[0]}},
		store.JobInsertParams{Name: "d", DependsOn: []int64{ids[0], ids[1]}},
		store.JobInsertParams{Name: "e", DependsOnIndex: []int{1}})
	got := []job.State{res[0].State, res[1].State, res[2].State}
	want := []job.State{job.StatePending, job.StateCanceled, job.StateCanceled}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("states %v, want %v", got, want)
	}
}

func TestDependencyUnknownParents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.insert(t, store.JobInsertParams{Name: "a"})[0]
	_, err := e.s.JobInsert(e.ctx, []store.JobInsertParams{{Name: "b", DependsOn: []int64{a + 7, a, a + 5}}})
	var unknown *store.UnknownJobsError
	if !errors.As(err, &unknown) || !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("err = %v, want UnknownJobsError", err)
	}
	if !reflect.DeepEqual(unknown.IDs, []int64{a + 5, a + 7}) {
		t.Errorf("ids %v", unknown.IDs)
	}
	var n int
	e.scalar(t, &n, `SELECT count(*) FROM jobs`)
	if n != 1 {
		t.Errorf("%d jobs after a refused insert, want 1", n)
	}
}

func TestDependencyBatchCallback(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.insertRes(t, store.JobInsertParams{Name: "a"}, store.JobInsertParams{Name: "b", MaxRetries: 0},
		store.JobInsertParams{Name: "cb", Payload: json.RawMessage(`{"k":"v"}`), Callback: true})
	a, b, cb := res[0].ID, res[1].ID, res[2].ID
	if res[2].State != job.StateWaiting {
		t.Fatalf("callback inserted %s", res[2].State)
	}
	got := e.claim(t, nil, "w1", "w2", "w3")
	if len(got) != 2 || got[cb].ID != 0 {
		t.Fatalf("claimed %v, want a and b", keys(got))
	}
	if done, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{{ID: a, LeaseToken: got[a].LeaseToken,
		WorkerID: got[a].WorkerID, Result: json.RawMessage(`{"n":1}`)}}); err != nil || len(done) != 1 {
		t.Fatalf("complete: %v", err)
	}
	e.wantState(t, cb, job.StateWaiting)
	e.fail(t, noRetryPolicy(t), store.Failure{ID: b, LeaseToken: got[b].LeaseToken, WorkerID: got[b].WorkerID,
		Error: "bad", Reason: job.ReasonPermanent, Permanent: true})
	j := e.wantState(t, cb, job.StatePending)
	want := fmt.Sprintf(`{"payload":{"k":"v"},"jobs":[
		{"job_id":"%d","name":"a","status":"completed","result":{"n":1},"error":null},
		{"job_id":"%d","name":"b","status":"failed","result":null,"error":"bad"}]}`, a, b)
	if !jsonEqual(t, j.Payload, []byte(want)) {
		t.Errorf("callback payload %s\nwant %s", j.Payload, want)
	}
	within(t, "next_run_at", j.NextRunAt, e.now(t), 5*time.Second)
}
