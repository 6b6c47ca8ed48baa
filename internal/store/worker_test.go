package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/store"
)

func TestWorkerSync(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := e.now(t).Truncate(time.Microsecond)
	assigned := now.Add(-time.Minute)
	first := []store.WorkerRow{
		{ID: "w1", JobTypes: []string{"email", "resize image"}, Concurrency: 4, State: "available", InFlight: 1, LastHeartbeatAt: now, LastAssignedAt: &assigned},
		{ID: "w2", JobTypes: []string{"*"}, Concurrency: 2, State: "busy", InFlight: 2, LastHeartbeatAt: now},
		{ID: "w3", Concurrency: 1, State: "available", LastHeartbeatAt: now},
	}
	if err := e.s.WorkerSync(e.ctx, e.epoch, first); err != nil {
		t.Fatalf("sync: %v", err)
	}
	got := list(t, e)
	if len(got) != 3 {
		t.Fatalf("workers = %+v", got)
	}
	for i, w := range got {
		want := first[i]
		if w.ID != want.ID || w.Concurrency != want.Concurrency || w.State != want.State || w.InFlight != want.InFlight ||
			!w.LastHeartbeatAt.Equal(want.LastHeartbeatAt) || len(w.JobTypes) != len(want.JobTypes) ||
			(len(want.JobTypes) > 0 && !slices.Equal(w.JobTypes, want.JobTypes)) {
			t.Errorf("worker %d = %+v, want %+v", i, w, want)
		}
	}
	if got[0].LastAssignedAt == nil || !got[0].LastAssignedAt.Equal(assigned) || got[1].LastAssignedAt != nil {
		t.Errorf("last_assigned_at = %v, %v", got[0].LastAssignedAt, got[1].LastAssignedAt)
	}

	// w1 changes and keeps its last assignment; w2 and w3 are gone.
	later := now.Add(time.Second)
	if err := e.s.WorkerSync(e.ctx, e.epoch, []store.WorkerRow{{ID: "w1", JobTypes: []string{"email"}, Concurrency: 8, State: "draining", InFlight: 3, LastHeartbeatAt: later}}); err != nil {
		t.Fatal(err)
	}
	got = list(t, e)
	w1 := got[0]
	if w1.State != "draining" || w1.Concurrency != 8 || w1.InFlight != 3 || !w1.LastHeartbeatAt.Equal(later) ||
		!slices.Equal(w1.JobTypes, []string{"email"}) || w1.LastAssignedAt == nil || !w1.LastAssignedAt.Equal(assigned) {
		t.Errorf("updated w1 = %+v", w1)
	}
	for _, w := range got[1:] {
		if w.State != "unavailable" || w.InFlight != 0 || !w.LastHeartbeatAt.Equal(now) {
			t.Errorf("missing worker %s = %+v, want unavailable with its last heartbeat kept", w.ID, w)
		}
	}

	// A worker that comes back is available again; an empty fleet marks all unavailable.
	if err := e.s.WorkerSync(e.ctx, e.epoch, []store.WorkerRow{{ID: "w2", Concurrency: 2, State: "available", LastHeartbeatAt: later}}); err != nil {
		t.Fatal(err)
	}
	if got := list(t, e); got[1].State != "available" || got[0].State != "unavailable" {
		t.Errorf("after w2 returned: %+v", got)
	}
	if err := e.s.WorkerSync(e.ctx, e.epoch, nil); err != nil {
		t.Fatal(err)
	}
	for _, w := range list(t, e) {
		if w.State != "unavailable" {
			t.Errorf("after an empty sync %s is %s", w.ID, w.State)
		}
	}
}

func list(t *testing.T, e *env) []store.WorkerRow {
	t.Helper()
	ws, err := e.s.WorkerList(e.ctx)
	if err != nil {
		t.Fatalf("list workers: %v", err)
	}
	return ws
}

func TestWorkerCleanupDeletesOnlyLongUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	old := time.Now().Add(-48 * time.Hour)
	if err := e.s.WorkerSync(e.ctx, e.epoch, []store.WorkerRow{
		{ID: "gone", JobTypes: []string{"*"}, Concurrency: 1, State: "unavailable", LastHeartbeatAt: old},
		{ID: "recent", JobTypes: []string{"*"}, Concurrency: 1, State: "unavailable", LastHeartbeatAt: time.Now()},
		{ID: "alive", JobTypes: []string{"*"}, Concurrency: 1, State: "available", LastHeartbeatAt: old},
	}); err != nil {
		t.Fatal(err)
	}
	n, err := e.s.WorkerCleanup(e.ctx, e.epoch, 24*time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("WorkerCleanup = %d, %v; want 1 deleted", n, err)
	}
	ws, err := e.s.WorkerList(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	if !slices.Equal(ids, []string{"alive", "recent"}) {
		t.Fatalf("workers left = %v, want alive and recent", ids)
	}
}
