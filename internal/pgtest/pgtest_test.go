package pgtest_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/pgtest"
)

// Main's goleak check, made after Cleanup, is also the check that Cleanup
// leaves nothing behind: the goroutine that supervises a server ends once
// it is reaped. The Pair tests freeze and cut off servers, which pgx may
// still be dialling to cancel a query (IgnoreAsyncCancel).
func TestMain(m *testing.M) { pgtest.Main(m, pgtest.IgnoreAsyncCancel) }

func connect(t *testing.T, dbURL string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect %s: %v", dbURL, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func dbName(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse %s: %v", dbURL, err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// Each database is migrated, and what one test writes the other never sees.
func TestNewDatabaseIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	var (
		mu   sync.Mutex
		urls = map[string]bool{}
		// Each subtest reads its table once both have written theirs.
		inserted sync.WaitGroup
	)
	inserted.Add(2)
	for i := range 2 {
		t.Run(fmt.Sprint("db", i), func(t *testing.T) {
			t.Parallel()
			var once sync.Once
			done := func() { once.Do(inserted.Done) }
			defer done() // a subtest that fails early does not hold up the other
			start := time.Now()
			dbURL := pgtest.NewDatabase(t)
			t.Logf("clone took %s", time.Since(start))
			if !strings.HasPrefix(dbURL, "postgres://postgres@127.0.0.1:") || !strings.HasSuffix(dbURL, "?sslmode=disable") {
				t.Errorf("URL = %q, want postgres://postgres@127.0.0.1:PORT/NAME?sslmode=disable", dbURL)
			}
			mu.Lock()
			urls[dbURL] = true
			mu.Unlock()

			conn := connect(t, dbURL)
			var migrations int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&migrations); err != nil {
				t.Fatalf("count migrations: %v", err)
			}
			if migrations == 0 {
				t.Errorf("no migrations recorded in the cloned database")
			}
			if _, err := conn.Exec(ctx, `CREATE TABLE probe (owner text)`); err != nil {
				t.Fatalf("create probe table (the other test's table leaked in?): %v", err)
			}
			if _, err := conn.Exec(ctx, `INSERT INTO probe VALUES ($1)`, t.Name()); err != nil {
				t.Fatalf("insert: %v", err)
			}
			done()
			inserted.Wait()
			var owners []string
			rows, _ := conn.Query(ctx, `SELECT owner FROM probe`)
			owners, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatalf("select: %v", err)
			}
			if len(owners) != 1 || owners[0] != t.Name() {
				t.Errorf("probe rows = %v, want only [%s]", owners, t.Name())
			}
		})
	}
	t.Cleanup(func() {
		if len(urls) != 2 {
			t.Errorf("got %d distinct URLs, want 2: %v", len(urls), urls)
		}
	})
}

// The database is dropped when its test ends, even with a session still open.
func TestNewDatabaseDroppedAtCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	var name string
	t.Run("user", func(t *testing.T) {
		dbURL := pgtest.NewDatabase(t)
		name = dbName(t, dbURL)
		connect(t, dbURL) // closed after the drop: the drop must force it
	})

	admin := connect(t, pgtest.URL("postgres"))
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		t.Fatalf("query pg_database: %v", err)
	}
	if exists {
		t.Errorf("database %s still exists after its test ended", name)
	}
}

// Many clones in parallel: CREATE DATABASE is serialised, none fails.
func TestNewDatabaseMany(t *testing.T) {
	t.Parallel()
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			conn := connect(t, pgtest.NewDatabase(t))
			if err := conn.Ping(context.Background()); err != nil {
				t.Fatalf("ping: %v", err)
			}
		})
	}
}

func TestServerSettings(t *testing.T) {
	t.Parallel()
	conn := connect(t, pgtest.NewDatabase(t))
	for setting, want := range map[string]string{
		"fsync":              "off",
		"synchronous_commit": "off",
		"full_page_writes":   "off",
		"max_connections":    "300",
		"server_encoding":    "UTF8",
	} {
		var got string
		if err := conn.QueryRow(context.Background(), "SHOW "+setting).Scan(&got); err != nil {
			t.Fatalf("SHOW %s: %v", setting, err)
		}
		if got != want {
			t.Errorf("%s = %s, want %s", setting, got, want)
		}
	}
}
