package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
)

// TestMigrateThroughTransactionPooler: every process migrates at start-up,
// so Migrate must work through pgbouncer in transaction mode while other
// clients share its server sessions. With a session advisory lock, the
// lock and its unlock ran in different server sessions and the lock stayed
// behind in the pooler's session: the next start hung at "migrate: lock".
func TestMigrateThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	direct := pgtest.NewDatabase(t)
	pooled := pgtest.StartPgBouncer(t, direct) + "&default_query_exec_mode=exec"
	ctx := t.Context()
	db, err := pgxpool.New(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)

	// Other clients keep the pooler's two server sessions changing hands.
	other, err := pgxpool.New(ctx, pooled)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	stop := make(chan struct{})
	var load sync.WaitGroup
	for i := 0; i < 3; i++ {
		load.Add(1)
		go func() {
			defer load.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = other.Exec(ctx, `SELECT pg_sleep(0.002)`)
			}
		}()
	}
	defer func() { close(stop); load.Wait() }()

	for round := 0; round < 4; round++ {
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				s, err := store.Open(c, pooled, store.Options{MaxConns: 2, Migrate: true})
				if err == nil {
					s.Close()
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: open %d with migrations through the pooler: %v", round, i, err)
			}
		}
		var held int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held != 0 {
			t.Fatalf("round %d: %d advisory locks left behind in the pooler's sessions", round, held)
		}
	}
}
