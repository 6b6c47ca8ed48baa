package coordinator

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// roundDelivered is a dispatch round whose delivery has landed: a round
// returns while its delivery is still in flight (deliver), and tests read
// the workers' lists right after. It returns the round's error, else the
// delivery's.
func (d *dispatcher) roundDelivered(ctx context.Context, scope roundScope) (bool, error) {
	more, err := d.round(ctx, scope)
	if derr := d.delivering.wait(); err == nil {
		err = derr
	}
	return more, err
}

// TestFailedDeliveryGivesJobsBackAndStopsTheLoop: with Redis unreachable,
// a round's delivery, running after the round returned, fails and gives
// its jobs back; the next round, which claims them again (their slots are
// free once more), finds that failure before delivering, gives its jobs
// back too and returns the error,
// so that the loop backs off instead of claiming and releasing in a spin.
// Nothing stays leased to the worker.
func TestFailedDeliveryGivesJobsBackAndStopsTheLoop(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if _, err := r.store.JobInsert(r.ctx, []store.JobInsertParams{
		{Name: "x", Payload: json.RawMessage(`1`)}, {Name: "x", Payload: json.RawMessage(`2`)}}); err != nil {
		t.Fatal(err)
	}
	down := r.unreachableQueue()
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "w", JobTypes: []string{"x"}, Concurrency: 2}, time.Now())
	d := &dispatcher{base: r.b, store: r.store, queue: down}
	released := r.b.metrics.reclaimed.WithLabelValues("delivery_failed")
	if _, err := d.round(r.ctx, scopeAll); err != nil {
		t.Fatalf("first round: %v; want nil (its delivery fails after it returns)", err)
	}
	<-d.delivering.done // failed (dialing takes its retries) and gave the jobs back
	if got := testutil.ToFloat64(released); got != 2 {
		t.Fatalf("%v jobs given back by the failed delivery, want 2", got)
	}
	if _, err := d.round(r.ctx, scopeAll); err == nil {
		t.Error("the round after a failed delivery returned no error")
	}
	if err := d.delivering.wait(); err != nil {
		t.Errorf("a delivery in flight after the failed round: %v", err)
	}
	if got := testutil.ToFloat64(released); got != 4 {
		t.Errorf("%v jobs given back for failed deliveries, want 4 (two rounds of two)", got)
	}
	var pending int
	if err := r.db.QueryRow(r.ctx, `SELECT count(*) FROM jobs WHERE status = 'pending' AND attempts = 0`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending != 2 {
		t.Errorf("%d of 2 jobs pending and unattempted after the failed deliveries", pending)
	}
	if n := len(r.b.l.workers.Leases("w")); n != 0 {
		t.Errorf("the worker still holds %d leases in the registry", n)
	}
}

// TestAckInFlightIsNotReappliedByAPendingRead: the applier acknowledges a
// batch while it reads the next; when that read is of the pending list
// (here most reads after an apply are: the rescan interval is a millisecond) it waits for
// the acknowledgement first, so no applied result is read and applied
// again: every job completes once and no result is counted stale.
func TestAckInFlightIsNotReappliedByAPendingRead(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(400, "w")
	a := r.results()
	a.rescan = time.Millisecond
	r.start(a)
	for i := 0; i < len(cs); i += 20 {
		var rs []wire.Result
		for _, c := range cs[i : i+20] {
			rs = append(rs, completed(c, `1`))
		}
		r.sendResults(rs...)
	}
	testwait.For(t, 20*time.Second, "every job completed", func() bool { return allIn(r.states(cs), "completed") })
	if got := testutil.ToFloat64(r.b.metrics.staleResults); got != 0 {
		t.Errorf("%v results counted stale: applied twice", got)
	}
}
