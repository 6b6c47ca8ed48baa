package coordinator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// TestDrainedWorkerGetsNoJobs: a drain an operator records in PostgreSQL
// (the submitter's POST /workers/{id}/drain) reaches the leader at its
// worker sync; from then on dispatch leases nothing to that worker, which
// the sync records as draining, and the other workers get every job.
func TestDrainedWorkerGetsNoJobs(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	now := time.Now()
	for _, id := range []string{"keep", "drain"} {
		r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: id, JobTypes: []string{"*"}, Concurrency: 50, Host: "h-" + id, Version: "v9"}, now)
	}
	m := &maintainer{base: r.b, store: r.store, queue: r.queue}
	m.syncWorkers(r.ctx) // the rows exist
	if _, err := r.store.WorkerDrain(r.ctx, "drain", "apikey:1"); err != nil {
		t.Fatal(err)
	}
	m.syncWorkers(r.ctx)
	if r.b.l.workers.Usable("drain") || !r.b.l.workers.Usable("keep") {
		t.Fatal("the sync did not apply the drain flag")
	}
	w, err := r.store.WorkerGet(r.ctx, "drain")
	if err != nil || w.State != "draining" || w.Host != "h-drain" || w.Version != "v9" {
		t.Errorf("drained worker's row: %+v %v", w, err)
	}
	ps := make([]store.JobInsertParams, 20)
	for i := range ps {
		ps[i] = store.JobInsertParams{Name: "x", Payload: json.RawMessage(`null`)}
	}
	if _, err := r.store.JobInsert(r.ctx, ps); err != nil {
		t.Fatal(err)
	}
	d := &dispatcher{base: r.b, store: r.store, queue: r.queue}
	if _, err := d.round(r.ctx); err != nil {
		t.Fatal(err)
	}
	var toKeep, toDrain int
	if err := r.db.QueryRow(r.ctx, `SELECT count(*) FILTER (WHERE worker_id = 'keep'), count(*) FILTER (WHERE worker_id = 'drain')
		FROM jobs WHERE status = 'leased'`).Scan(&toKeep, &toDrain); err != nil {
		t.Fatal(err)
	}
	if toDrain != 0 || toKeep != 20 {
		t.Errorf("leased %d to the kept worker and %d to the drained one; want 20 and 0", toKeep, toDrain)
	}
}
