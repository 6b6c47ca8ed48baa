package store_test

import (
	"testing"
	"time"

	"github.com/dtsched/dts/internal/store"
)

func TestElector(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := store.NewElector(e.url, "coord-a")
	b := store.NewElector(e.url, "coord-b")
	t.Cleanup(a.Release)
	t.Cleanup(b.Release)

	epochA, err := a.TryAcquire(e.ctx)
	if err != nil || epochA != 1 {
		t.Fatalf("a acquire = %d, %v; want epoch 1", epochA, err)
	}
	if got, err := b.TryAcquire(e.ctx); err != nil || got != 0 {
		t.Fatalf("b acquire while a leads = %d, %v; want 0", got, err)
	}
	if err := a.Check(e.ctx, epochA); err != nil {
		t.Errorf("a check: %v", err)
	}
	if epoch, id, err := e.s.LeaderGet(e.ctx); err != nil || epoch != epochA || id != "coord-a" {
		t.Errorf("leader = %d %q %v", epoch, id, err)
	}

	a.Release()
	epochB := acquire(t, e, b)
	if epochB != epochA+1 {
		t.Fatalf("b acquire after a released = %d, want %d", epochB, epochA+1)
	}
	if err := a.Check(e.ctx, epochA); err == nil {
		t.Error("a's check passed after it released")
	}
	if err := b.Check(e.ctx, epochB); err != nil {
		t.Errorf("b check: %v", err)
	}
	if got, err := a.TryAcquire(e.ctx); err != nil || got != 0 {
		t.Errorf("a acquire while b leads = %d, %v; want 0", got, err)
	}
	if err := a.Check(e.ctx, epochA); err == nil {
		t.Error("a's check passed for its old epoch while b leads")
	}
	if epoch, id, _ := e.s.LeaderGet(e.ctx); epoch != epochB || id != "coord-b" {
		t.Errorf("leader = %d %q, want %d coord-b", epoch, id, epochB)
	}
}

// TestElectorLostConnection: leadership lives exactly as long as the
// elector's session, and a leader whose epoch moved on is deposed.
func TestElectorLostConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := store.NewElector(e.url, "coord-a")
	b := store.NewElector(e.url, "coord-b")
	t.Cleanup(a.Release)
	t.Cleanup(b.Release)
	epochA, err := a.TryAcquire(e.ctx)
	if err != nil || epochA == 0 {
		t.Fatalf("a acquire = %d, %v", epochA, err)
	}

	// Kill a's session, as a network partition or PostgreSQL restart would.
	var killed bool
	e.scalar(t, &killed, `SELECT bool_or(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND objid = 727002 AND granted`)
	if !killed {
		t.Fatal("found no session holding the leader lock")
	}
	epochB := acquire(t, e, b)
	if epochB != epochA+1 {
		t.Fatalf("b epoch = %d, want %d", epochB, epochA+1)
	}
	if err := a.Check(e.ctx, epochA); err == nil {
		t.Error("a's check passed after its session was killed")
	}

	// Someone bumped the epoch behind b's back (an operator, a bug): b is
	// deposed and lets go of the lock.
	e.exec(t, `UPDATE coordinator_leader SET epoch = epoch + 1`)
	if err := b.Check(e.ctx, epochB); err == nil {
		t.Error("b's check passed for a superseded epoch")
	}
	if got := acquire(t, e, a); got != epochB+2 {
		t.Errorf("a acquire after b was deposed = %d, want %d", got, epochB+2)
	}
}

// acquire polls TryAcquire until it wins. A released lock is free once the
// old session's backend has exited, a moment after its connection closed.
func acquire(t *testing.T, e *env, el *store.Elector) int64 {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		epoch, err := el.TryAcquire(e.ctx)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if epoch != 0 {
			return epoch
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("leader lock not free after 10s")
		}
	}
}
