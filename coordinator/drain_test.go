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
	if _, err := d.roundDelivered(r.ctx, scopeAll); err != nil {
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

// TestDrainStandsThroughRestartUntilUndrain: an operator's drain request
// outlives the worker's crash, however long it stays down: the worker that
// comes back under the same id takes no job, from its first heartbeat on,
// and shows as draining. Only an undrain (the submitter's POST
// /workers/{id}/undrain, which clears the flag in PostgreSQL) makes it
// usable again, from the leader's next worker sync.
func TestDrainStandsThroughRestartUntilUndrain(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	hb := wire.Heartbeat{WorkerID: "w", JobTypes: []string{"*"}, Concurrency: 50}
	r.b.l.workers.Heartbeat(hb, time.Now())
	m := &maintainer{base: r.b, store: r.store, queue: r.queue}
	m.syncWorkers(r.ctx)
	if _, err := r.store.WorkerDrain(r.ctx, "w", "apikey:1"); err != nil {
		t.Fatal(err)
	}
	m.syncWorkers(r.ctx)
	if r.b.l.workers.Usable("w") {
		t.Fatal("the sync did not apply the drain flag")
	}

	// It crashes, is declared unavailable, and stays down long enough for
	// the registry to forget it; its row (and the flag) stays.
	r.b.l.workers.Expire(time.Now().Add(24 * time.Hour))
	m.syncWorkers(r.ctx)
	if ids := r.b.l.workers.Remove(time.Now().Add(48*time.Hour), time.Hour); len(ids) != 1 {
		t.Fatalf("the registry forgot %v, want [w]", ids)
	}
	// It restarts under the same id: held back from its first heartbeat,
	// before any sync.
	r.b.l.workers.Heartbeat(hb, time.Now())
	if r.b.l.workers.Usable("w") {
		t.Fatal("the restarted worker is usable before the leader's next sync; the drain request stands")
	}
	ps := make([]store.JobInsertParams, 20)
	for i := range ps {
		ps[i] = store.JobInsertParams{Name: "x", Payload: json.RawMessage(`null`)}
	}
	if _, err := r.store.JobInsert(r.ctx, ps); err != nil {
		t.Fatal(err)
	}
	d := &dispatcher{base: r.b, store: r.store, queue: r.queue}
	leased := func() int {
		t.Helper()
		if _, err := d.roundDelivered(r.ctx, scopeAll); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := r.db.QueryRow(r.ctx, `SELECT count(*) FROM jobs WHERE status = 'leased' AND worker_id = 'w'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := leased(); n != 0 {
		t.Fatalf("leased %d jobs to the restarted drained worker", n)
	}
	m.syncWorkers(r.ctx)
	if w, err := r.store.WorkerGet(r.ctx, "w"); err != nil || w.State != "draining" || w.DrainRequestedAt == nil || w.DrainRequestedBy != "apikey:1" {
		t.Fatalf("restarted drained worker's row: %+v %v", w, err)
	}

	// The undrain reaches the leader at its next sync.
	if _, err := r.store.WorkerUndrain(r.ctx, "w"); err != nil {
		t.Fatal(err)
	}
	m.syncWorkers(r.ctx)
	if !r.b.l.workers.Usable("w") {
		t.Fatal("the undrained worker is not usable after the sync")
	}
	if w, err := r.store.WorkerGet(r.ctx, "w"); err != nil || w.State != "available" || w.DrainRequestedAt != nil {
		t.Errorf("undrained worker's row: %+v %v", w, err)
	}
	if n := leased(); n != 20 {
		t.Errorf("leased %d jobs to the undrained worker, want 20", n)
	}
}
