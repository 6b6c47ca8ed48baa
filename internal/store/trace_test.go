package store_test

import (
	"testing"
	"time"

	"github.com/dtsched/dts/internal/store"
)

// TestJobTraceParent: a job's trace parent is stored by the insert (a
// batch where only some jobs have one, and a batch where none has: the
// NULL array), returned by the claims for the delivery (the plain claim
// and the claim by queue) and by JobGet.
func TestJobTraceParent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ids := e.insert(t, store.JobInsertParams{Name: "a", TraceParent: tp}, store.JobInsertParams{Name: "a"})
	plain := e.insert(t, store.JobInsertParams{Name: "b"})
	queued := e.insert(t, store.JobInsertParams{Name: "c", Queue: "q", TraceParent: tp})
	for id, want := range map[int64]string{ids[0]: tp, ids[1]: "", plain[0]: "", queued[0]: tp} {
		if got := e.get(t, id).TraceParent; got != want {
			t.Errorf("job %d: JobGet's TraceParent = %q, want %q", id, got, want)
		}
	}
	got := e.claim(t, []string{"a", "b"}, "w1", "w2", "w3")
	for id, want := range map[int64]string{ids[0]: tp, ids[1]: "", plain[0]: ""} {
		if c, ok := got[id]; !ok || c.TraceParent != want {
			t.Errorf("job %d: claimed %v with TraceParent %q, want %q", id, ok, c.TraceParent, want)
		}
	}
	cs, err := e.s.JobClaimQueues(e.ctx, store.JobClaimQueuesParams{JobClaimParams: store.JobClaimParams{
		Epoch: e.epoch, Slots: []string{"w"}, Lease: time.Minute}, Queues: []string{"q"}})
	if err != nil || len(cs) != 1 || cs[0].TraceParent != tp {
		t.Fatalf("claim by queue = %+v, %v; want job %d with its trace parent", cs, err, queued[0])
	}
}
