package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
)

func TestLeaderLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // holds epoch 1 as "test" for an hour
	if got, err := e.s.LeaderAcquire(e.ctx, "coord-b", time.Minute); err != nil || got != 0 {
		t.Fatalf("acquire while another leads = %d, %v; want 0", got, err)
	}
	if err := e.s.LeaderRenew(e.ctx, e.epoch, time.Minute); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if err := e.s.LeaderResign(e.ctx, e.epoch); err != nil {
		t.Fatal(err)
	}
	epochB, err := e.s.LeaderAcquire(e.ctx, "coord-b", time.Minute)
	if err != nil || epochB != e.epoch+1 {
		t.Fatalf("acquire after resign = %d, %v; want %d", epochB, err, e.epoch+1)
	}
	if epoch, id, err := e.s.LeaderGet(e.ctx); err != nil || epoch != epochB || id != "coord-b" {
		t.Errorf("leader = %d %q %v; want %d coord-b", epoch, id, err, epochB)
	}
	if err := e.s.LeaderRenew(e.ctx, e.epoch, time.Minute); !errors.Is(err, job.ErrDeposed) {
		t.Errorf("old leader's renew = %v; want ErrDeposed", err)
	}
	// A resign of a superseded epoch does not end the current lease.
	if err := e.s.LeaderResign(e.ctx, e.epoch); err != nil {
		t.Fatal(err)
	}
	if got, err := e.s.LeaderAcquire(e.ctx, "coord-c", time.Minute); err != nil || got != 0 {
		t.Errorf("acquire after a stale resign = %d, %v; want 0", got, err)
	}
}

// TestLeaderLeaseExpires: a leader that stops renewing (frozen, partitioned)
// loses the lease when its time runs out, and it cannot renew it after.
func TestLeaderLeaseExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.s.LeaderResign(e.ctx, e.epoch); err != nil {
		t.Fatal(err)
	}
	a, err := e.s.LeaderAcquire(e.ctx, "coord-a", 300*time.Millisecond)
	if err != nil || a == 0 {
		t.Fatalf("a acquire = %d, %v", a, err)
	}
	var b int64
	testwait.For(t, 5*time.Second, "b to take over the expired lease", func() bool {
		if b, err = e.s.LeaderAcquire(e.ctx, "coord-b", time.Minute); err != nil {
			t.Fatal(err)
		}
		return b != 0
	})
	if b != a+1 {
		t.Errorf("b's epoch = %d, want %d", b, a+1)
	}
	if err := e.s.LeaderRenew(e.ctx, a, time.Minute); !errors.Is(err, job.ErrDeposed) {
		t.Errorf("a's renew after expiry = %v; want ErrDeposed", err)
	}
}

// TestDeposedLeaderWritesNothing: once a successor has taken over, every
// write the old leader makes is refused whole with ErrDeposed: claims,
// results, releases, reclaims, extensions, retention and the workers table.
func TestDeposedLeaderWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 3, "x", 0)
	cs := e.claim(t, nil, "w1", "w1")
	old := e.epoch
	if err := e.s.LeaderResign(e.ctx, old); err != nil {
		t.Fatal(err)
	}
	if n, err := e.s.LeaderAcquire(e.ctx, "successor", time.Hour); err != nil || n != old+1 {
		t.Fatalf("successor acquire = %d, %v", n, err)
	}
	e.exec(t, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE status = 'leased'`)
	var c store.Claimed
	for _, x := range cs {
		c = x
	}
	deposed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, job.ErrDeposed) {
			t.Errorf("%s by the deposed leader: err = %v; want ErrDeposed", what, err)
		}
	}
	_, err := e.s.JobClaimBatch(e.ctx, store.JobClaimParams{Epoch: old, Slots: []string{"w2"}, Lease: time.Minute})
	deposed("claim", err)
	_, err = e.s.JobCompleteMany(e.ctx, old, []store.Completion{{ID: c.ID, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID, Result: json.RawMessage(`1`)}})
	deposed("complete", err)
	_, err = e.s.JobFailMany(e.ctx, old, []store.Failure{{ID: c.ID, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID, Reason: job.ReasonError}}, fixedPolicy(0))
	deposed("fail", err)
	_, err = e.s.JobReleaseMany(e.ctx, old, []store.Release{{ID: c.ID, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID}})
	deposed("release", err)
	_, err = e.s.JobReclaimLeases(e.ctx, old, []store.Release{{ID: c.ID, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID}}, fixedPolicy(0))
	deposed("reclaim of a worker's leases", err)
	_, err = e.s.JobReclaimExpired(e.ctx, old, nil, fixedPolicy(0))
	deposed("reclaim of expired leases", err)
	_, err = e.s.JobLeaseExtend(e.ctx, store.LeaseExtendParams{Epoch: old, IDs: []int64{c.ID}, Tokens: []int64{c.LeaseToken},
		Workers: []string{c.WorkerID}, Lease: time.Minute})
	deposed("lease extension", err)
	_, err = e.s.JobCleanup(e.ctx, old, 0, 0, 10)
	deposed("retention", err)
	deposed("workers sync", e.s.WorkerSync(e.ctx, old, []store.WorkerRow{{ID: "w1", Concurrency: 1, State: "available"}}))
	deposed("worker delete", e.s.WorkerDelete(e.ctx, old, "w1"))
	_, err = e.s.WorkerCleanup(e.ctx, old, 0)
	deposed("workers cleanup", err)

	// Nothing changed: two jobs still leased as claimed, with expired
	// leases, and one pending.
	var leased, pending int
	e.scalar(t, &leased, `SELECT count(*) FROM jobs WHERE status = 'leased' AND lease_expires_at < now()`)
	e.scalar(t, &pending, `SELECT count(*) FROM jobs WHERE status = 'pending' AND attempts = 0`)
	if leased != 2 || pending != 1 || len(ids) != 3 {
		t.Errorf("after the deposed leader's writes: %d leased, %d pending; want 2 and 1", leased, pending)
	}
	// The successor's writes go through.
	if out, err := e.s.JobReclaimExpired(e.ctx, old+1, nil, fixedPolicy(0)); err != nil || len(out) != 2 {
		t.Errorf("successor's reclaim = %d, %v; want 2", len(out), err)
	}
}

// TestFenceWaitsForWritesInProgress: a successor's take-over waits for the
// old leader's fenced transaction in progress, and that transaction's
// writes, once committed, came before the new epoch.
func TestFenceWaitsForWritesInProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tx, err := e.db.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(e.ctx, `SELECT dts_fence($1)`, e.epoch); err != nil {
		t.Fatal(err)
	}
	if err := e.s.LeaderResign(e.ctx, e.epoch); err != nil {
		t.Fatal(err)
	}
	got := make(chan int64, 1)
	go func() {
		n, err := e.s.LeaderAcquire(e.ctx, "successor", time.Hour)
		if err != nil {
			t.Error(err)
		}
		got <- n
	}()
	select {
	case n := <-got:
		t.Fatalf("the take-over (epoch %d) did not wait for the old leader's open write", n)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != e.epoch+1 {
		t.Errorf("take-over epoch = %d, want %d", n, e.epoch+1)
	}
}

// TestTakeOverEndsAFrozenLeadersWrite: a leader frozen in the middle of a
// fenced write (stopped between two statements of its transaction) holds
// the fence until it wakes. Its lease runs out, and a standby takes over
// within its election attempt all the same: the stuck write is ended
// (uncommitted, it loses nothing) instead of waited for.
func TestTakeOverEndsAFrozenLeadersWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.s.LeaderResign(e.ctx, e.epoch); err != nil {
		t.Fatal(err)
	}
	a, err := e.s.LeaderAcquire(e.ctx, "coord-a", 300*time.Millisecond)
	if err != nil || a == 0 {
		t.Fatalf("a acquire = %d, %v", a, err)
	}
	frozen, err := e.db.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = frozen.Rollback(context.Background()) }()
	if _, err := frozen.Exec(e.ctx, `SELECT dts_fence($1)`, a); err != nil {
		t.Fatal(err)
	}
	// The frozen transaction stays open; b tries once its lease is out,
	// as a standby's election loop does, whose context has no deadline. A
	// try while the write is younger than stuckFenceAge gives up waiting
	// for it after stuckFenceAge (a lock timeout, the next tick tries
	// again); a later one ends it. A try that waits on and on is the bug.
	var b int64
	testwait.NoError(t, 15*time.Second, "b to take over from the frozen leader", func() error {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		defer cancel()
		b, err = e.s.LeaderAcquire(ctx, "coord-b", time.Minute)
		switch {
		case ctx.Err() != nil:
			t.Fatalf("b acquire waited %v on the frozen leader's write: %v", 5*time.Second, err)
		case err != nil:
			return fmt.Errorf("b acquire: %w", err)
		case b == 0:
			return errors.New("a's lease has not run out")
		}
		return nil
	})
	if b != a+1 {
		t.Errorf("b's epoch = %d, want %d", b, a+1)
	}
	if _, err := frozen.Exec(e.ctx, `SELECT 1`); err == nil {
		t.Error("the frozen leader's transaction still runs after the take-over")
	}
}

// TestTakeOverSparesOtherDatabasesWrites: advisory locks belong to their
// database, so a take-over ends only its own database's stuck fence
// holders. Another dts (staging beside production, or a second tenant) on
// the same server, in a long fenced write, is left alone.
func TestTakeOverSparesOtherDatabasesWrites(t *testing.T) {
	t.Parallel()
	e, other := newEnv(t), newEnv(t)
	busy, err := other.db.Begin(other.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Rollback(context.Background()) }()
	if _, err := busy.Exec(other.ctx, `SELECT dts_fence($1)`, other.epoch); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the other database's fenced write to be open over a second", func() bool {
		var open bool
		if err := busy.QueryRow(other.ctx, `SELECT clock_timestamp() - xact_start > interval '1.2 seconds'
			FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		return open
	})
	if err := e.s.LeaderResign(e.ctx, e.epoch); err != nil {
		t.Fatal(err)
	}
	a, err := e.s.LeaderAcquire(e.ctx, "coord-a", 100*time.Millisecond)
	if err != nil || a == 0 {
		t.Fatalf("a acquire = %d, %v", a, err)
	}
	testwait.For(t, 10*time.Second, "b to take over from a", func() bool {
		b, err := e.s.LeaderAcquire(e.ctx, "coord-b", time.Minute)
		if err != nil {
			t.Fatalf("b acquire: %v", err)
		}
		return b != 0
	})
	if _, err := busy.Exec(other.ctx, `SELECT 1`); err != nil {
		t.Errorf("the other database's write was ended by this database's take-over: %v", err)
	}
}
