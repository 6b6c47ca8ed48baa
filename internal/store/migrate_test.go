package store_test

import (
	"context"
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
)

// migratedPool is a pool on a new database with every migration applied,
// closed when the test ends.
func migratedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// migrationFiles returns the migrations as Migrate embeds them, as a
// map a test can edit.
func migrationFiles(t *testing.T) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := fs.WalkDir(os.DirFS("."), "migrations", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(path, ".up.sql") {
			return err
		}
		b, err := os.ReadFile(path)
		m[path] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// edited is files with migration 003 changed by one comment.
func edited(files fstest.MapFS) fstest.MapFS {
	out := fstest.MapFS{}
	for k, v := range files {
		out[k] = v
	}
	const name = "migrations/003_claim_function.up.sql"
	out[name] = &fstest.MapFile{Data: append([]byte("-- an innocent-looking edit\n"), files[name].Data...)}
	return out
}

func checksums(t *testing.T, ctx context.Context, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT version, coalesce(checksum, '') FROM schema_migrations`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var v, sum string
		if err := rows.Scan(&v, &sum); err != nil {
			t.Fatal(err)
		}
		out[v] = sum
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func wantEditRefused(t *testing.T, ctx context.Context, pool *pgxpool.Pool, files fstest.MapFS) {
	t.Helper()
	err := store.MigrateFS(ctx, pool, edited(files))
	const want = "migration 003_claim_function.up.sql was edited after it was applied"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Migrate with an edited 003 = %v, want an error containing %q", err, want)
	}
}

// On a fresh database Migrate applies every migration and records each
// file's checksum; run again it changes nothing; with migration 003
// edited it refuses to start, naming the file.
func TestMigrateRecordsChecksumsAndRefusesAnEdit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := migratedPool(t)
	// An empty database: the clone of the migrated template, emptied.
	if _, err := pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`); err != nil {
		t.Fatal(err)
	}
	files := migrationFiles(t)
	if err := store.MigrateFS(ctx, pool, files); err != nil {
		t.Fatalf("migrate a fresh database: %v", err)
	}
	got := checksums(t, ctx, pool)
	if len(got) != len(files) {
		t.Errorf("%d migrations recorded, want %d: %v", len(got), len(files), got)
	}
	for v, sum := range got {
		if len(sum) != 64 {
			t.Errorf("migration %s recorded with checksum %q", v, sum)
		}
	}
	if err := store.MigrateFS(ctx, pool, files); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	wantEditRefused(t, ctx, pool, files)
	// The refusal changed nothing; the real files still start.
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate after a refusal: %v", err)
	}
}

// A database migrated before checksums were recorded (up to 005, no
// checksum column) gets migration 006 and the checksums of the files as
// they are; from then on an edit is refused.
func TestMigrateFillsInChecksumsOfEarlierMigrations(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := migratedPool(t)
	if _, err := pool.Exec(ctx, `ALTER TABLE schema_migrations DROP COLUMN checksum;
		DELETE FROM schema_migrations WHERE version = '006_migration_checksums'`); err != nil {
		t.Fatal(err)
	}
	files := migrationFiles(t)
	if err := store.MigrateFS(ctx, pool, files); err != nil {
		t.Fatalf("migrate a database from before checksums: %v", err)
	}
	got := checksums(t, ctx, pool)
	for _, v := range []string{"001_init", "003_claim_function", "005_leader_lease", "006_migration_checksums"} {
		if len(got[v]) != 64 {
			t.Errorf("migration %s: checksum %q after the upgrade", v, got[v])
		}
	}
	wantEditRefused(t, ctx, pool, files)
}

// TestMigrateNameDueIndex: migration 021 replaces jobs_due_idx with
// jobs_name_due_idx on a database that has jobs, keeps the index of that
// name an operator created for a mixed fleet before (docs/operations.md,
// "Mixed fleets"), and rebuilds one left invalid by a failed concurrent
// build.
func TestMigrateNameDueIndex(t *testing.T) {
	t.Parallel()
	for _, before := range []string{"none", "valid", "invalid"} {
		t.Run(before, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := migratedPool(t)
			// The schema as migration 020 left it, with some jobs.
			setup := `DROP INDEX jobs_name_due_idx;
				CREATE INDEX jobs_due_idx ON jobs (priority DESC, next_run_at, id)
					WHERE status IN ('pending', 'retrying') AND limit_key IS NULL;
				DELETE FROM schema_migrations WHERE version = '021_name_due_index';
				INSERT INTO jobs (name) SELECT 'n' || (i % 3) FROM generate_series(1, 100) AS i;`
			if before != "none" {
				setup += `CREATE INDEX jobs_name_due_idx ON jobs (name, priority DESC, next_run_at, id)
					WHERE status IN ('pending', 'retrying') AND limit_key IS NULL;`
			}
			if before == "invalid" {
				setup += `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'jobs_name_due_idx'::regclass;`
			}
			if _, err := pool.Exec(ctx, setup); err != nil {
				t.Fatal(err)
			}
			var oidBefore uint32
			if before != "none" {
				if err := pool.QueryRow(ctx, `SELECT 'jobs_name_due_idx'::regclass::oid`).Scan(&oidBefore); err != nil {
					t.Fatal(err)
				}
			}
			if err := store.MigrateFS(ctx, pool, migrationFiles(t)); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			var old, valid bool
			var oid uint32
			if err := pool.QueryRow(ctx, `SELECT to_regclass('jobs_due_idx') IS NOT NULL, i.indisvalid, i.indexrelid
				FROM pg_index i WHERE i.indexrelid = 'jobs_name_due_idx'::regclass`).Scan(&old, &valid, &oid); err != nil {
				t.Fatalf("after the migration: %v", err)
			}
			if old || !valid {
				t.Errorf("after the migration jobs_due_idx exists: %v, jobs_name_due_idx valid: %v; want false, true", old, valid)
			}
			if kept := oid == oidBefore; kept != (before == "valid") {
				t.Errorf("an index that was %s before: kept %v", before, kept)
			}
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'pending' AND limit_key IS NULL AND name = 'n1'`).Scan(&n); err != nil || n != 34 {
				t.Errorf("pending n1 jobs after the migration: %d, %v; want 34", n, err)
			}
		})
	}
}
