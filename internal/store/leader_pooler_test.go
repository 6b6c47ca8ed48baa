package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
)

// TestLeaderLeaseThroughTransactionPooler: leadership and its fencing work
// through pgbouncer in transaction mode, where two coordinators' statements
// share the same two server sessions, and a session advisory lock (the old
// design) does not.
func TestLeaderLeaseThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	direct := pgtest.NewDatabase(t)
	// pgbouncer 1.18 does not carry named prepared statements from one
	// transaction to the next: pgx must use unnamed ones (with pgx's default,
	// the second store fails with "prepared statement stmtcache_… already
	// exists").
	pooled := pgtest.StartPgBouncer(t, direct) + "&default_query_exec_mode=exec"
	ctx := t.Context()

	open := func(name string) *store.Store {
		s, err := store.Open(ctx, pooled, store.Options{MaxConns: 2, PinIndexPlans: true})
		if err != nil {
			t.Fatalf("open store %s through the pooler: %v", name, err)
		}
		t.Cleanup(s.Close)
		return s
	}
	a, b := open("A"), open("B")
	db, err := pgxpool.New(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)

	// Runtime parameters sent at connection never reach PostgreSQL through
	// the pooler (ignore_startup_parameters drops them, store.Open's
	// included): in production they must come from the role
	// (docs/operations.md, "Through a connection pooler").
	cfg, err := pgxpool.ParseConfig(pooled)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	viaPooler, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mode string
	err = viaPooler.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode)
	viaPooler.Close()
	if err != nil || mode != "auto" {
		t.Fatalf("plan_cache_mode asked for at connection through the pooler = %q, %v; want it dropped (auto)", mode, err)
	}

	const ttl = 500 * time.Millisecond
	epochA, err := a.LeaderAcquire(ctx, "coord-a", ttl)
	if err != nil || epochA == 0 {
		t.Fatalf("A acquire = %d, %v; want an epoch", epochA, err)
	}
	if got, err := b.LeaderAcquire(ctx, "coord-b", ttl); err != nil || got != 0 {
		t.Fatalf("B acquire while A leads = %d, %v; want 0", got, err)
	}
	// A renews past several TTLs, each time its lease has a third of the
	// TTL used by PostgreSQL's clock (the one it is judged by); B never
	// gets in.
	for i := 0; i < 5; i++ {
		if err := a.LeaderRenew(ctx, epochA, ttl); err != nil {
			t.Fatalf("A renew %d: %v", i, err)
		}
		if got, err := b.LeaderAcquire(ctx, "coord-b", ttl); err != nil || got != 0 {
			t.Fatalf("B acquire while A renews (%d) = %d, %v; want 0", i, got, err)
		}
		testwait.For(t, ttl, "a third of A's lease to be used", func() bool {
			var used bool
			if err := db.QueryRow(ctx, `SELECT expires_at - clock_timestamp() <= $1 * interval '1 millisecond'
				FROM coordinator_lease`, (ttl - ttl/3).Milliseconds()).Scan(&used); err != nil {
				t.Fatal(err)
			}
			return used
		})
	}

	beat := time.Now().Truncate(time.Millisecond)
	workers := func(id string) []store.WorkerRow {
		return []store.WorkerRow{{ID: id, JobTypes: []string{"t"}, Concurrency: 1, State: "available", LastHeartbeatAt: beat}}
	}
	if err := a.WorkerSync(ctx, epochA, workers("w-a")); err != nil {
		t.Fatalf("A's fenced write while leading: %v", err)
	}

	// A freezes: it stops renewing. B takes over once the lease runs out.
	var epochB int64
	testwait.For(t, 10*time.Second, "B to take over the lease A stopped renewing", func() bool {
		if epochB, err = b.LeaderAcquire(ctx, "coord-b", time.Minute); err != nil {
			t.Fatalf("B acquire: %v", err)
		}
		return epochB != 0
	})
	if epochB != epochA+1 {
		t.Errorf("B's epoch = %d, want %d", epochB, epochA+1)
	}

	// A wakes up: deposed, and its writes change nothing.
	if err := a.LeaderRenew(ctx, epochA, ttl); !errors.Is(err, job.ErrDeposed) {
		t.Errorf("A's renew after B took over = %v; want ErrDeposed", err)
	}
	if err := a.WorkerSync(ctx, epochA, workers("w-a2")); !errors.Is(err, job.ErrDeposed) {
		t.Errorf("A's fenced write after B took over = %v; want ErrDeposed", err)
	}
	if err := b.WorkerSync(ctx, epochB, workers("w-b")); err != nil {
		t.Fatalf("B's fenced write: %v", err)
	}
	var ids []string
	if err := db.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM workers WHERE state = 'available'`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 || ids[0] != "w-b" {
		t.Errorf("available workers = %v; want only B's [w-b] (A's deposed sync must change nothing)", ids)
	}
	if epoch, id, err := b.LeaderGet(ctx); err != nil || epoch != epochB || id != "coord-b" {
		t.Errorf("leader = %d %q %v; want %d coord-b", epoch, id, err, epochB)
	}

	t.Run("session advisory lock", func(t *testing.T) {
		// The old design: the leader holds pg_try_advisory_lock in its
		// session. Through the pooler the lock lands in whichever server
		// session ran that transaction, and stays there.
		pool := func() *pgxpool.Pool {
			p, err := pgxpool.New(ctx, pooled)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			return p
		}
		const key = 4242
		try := func(p *pgxpool.Pool) (got bool, pid int32) {
			t.Helper()
			if err := p.QueryRow(ctx, `SELECT pg_try_advisory_lock($1::bigint), pg_backend_pid()`, key).Scan(&got, &pid); err != nil {
				t.Fatal(err)
			}
			return got, pid
		}
		la := pool()
		if got, _ := try(la); !got {
			t.Fatal("A's first pg_try_advisory_lock = false")
		}
		// A dies: every connection it had is closed.
		la.Close()
		var holder int32
		if err := db.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND granted`,
			key).Scan(&holder); err != nil {
			t.Fatalf("the lock did not outlive A (it would have without the pooler's shared sessions): %v", err)
		}
		// B's try is answered by whichever server session it lands on: the
		// holder's says yes (a second "leader" while the first is held),
		// the other says no for as long as the pooler keeps the holder's
		// session (a dead leader is never replaced).
		gotB, pidB := try(pool())
		if gotB != (pidB == holder) {
			t.Errorf("B's try on server session %d = %v; the lock is held by session %d", pidB, gotB, holder)
		}
		t.Logf("A died holding the lock in server session %d; B's try ran on session %d and got %v", holder, pidB, gotB)
	})
}
