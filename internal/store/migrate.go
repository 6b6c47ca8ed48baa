package store

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migrations are migrations/NNN_name.up.sql, applied once each, in name
// order, and immutable once released: schema_migrations records the
// SHA-256 of each file as applied (migration 006 added the column), and
// Migrate refuses to start when an applied file no longer matches, since
// an edit would otherwise be skipped on every existing database and seen
// only by fresh ones (the tests'). To change the schema, add a migration.
// migrations/checksums.txt lists every file's checksum;
// TestMigrationChecksumsRecorded fails when a file differs from it, so an
// edit fails the tests too. functions.sql is not a migration: it is applied
// on every start and edited in place.
//
// A migration whose data change needs a function of functions.sql (which
// is applied after the migrations, since its functions use their tables)
// leaves that change to a statement Migrate runs right after
// functions.sql, in the same transaction, when that migration was applied
// in this run: 015's backfill of error fingerprints.

//go:embed migrations/*.up.sql
var migrationFS embed.FS

// functionsSQL holds the server-side functions, applied on every start
// after the migrations (CREATE OR REPLACE; edit the file in place).
//
//go:embed functions.sql
var functionsSQL string

// migrationLockKey is the advisory lock that serialises migrations when
// several processes start at once.
const migrationLockKey = 727_001

// migration is one file of migrations/.
type migration struct {
	file     string // base name, e.g. "003_claim_function.up.sql"
	version  string // the name recorded in schema_migrations: "003_claim_function"
	body     []byte
	checksum string // hex SHA-256 of body
}

// migrations reads migrations/*.up.sql of fsys in name order.
func migrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.up.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]migration, len(names))
	for i, name := range names {
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		file := path.Base(name)
		out[i] = migration{file: file, version: strings.TrimSuffix(file, ".up.sql"), body: body, checksum: checksum(body)}
	}
	return out, nil
}

// checksum is the hex SHA-256 of a migration file, as sha256sum prints it.
func checksum(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Migrate applies every embedded migration not yet recorded in
// schema_migrations, in file-name order, then functions.sql, in one
// transaction under a transaction-scoped advisory lock. It is safe to call
// from every process at start-up, through a pooler in transaction mode
// too: a session lock would be taken in whichever server session ran that
// statement, its unlock could run in another, and the lock would stay
// behind in the pooler's session and hang the next start. A migration that
// fails leaves nothing of this run applied.
//
// Before applying anything it compares the checksum recorded for each
// applied migration with the embedded file's and fails, naming the file,
// when they differ. A migration recorded without a checksum (applied
// before migration 006, or cut short between its commit and the end of
// Migrate) gets the checksum of the embedded file: on the first start
// after an upgrade, the files as they are then become the reference. A
// recorded migration with no embedded file (a newer binary applied it) is
// left alone.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return migrate(ctx, pool, migrationFS)
}

// migrate is Migrate with the migrations read from fsys (tests pass an
// edited copy).
func migrate(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS) error {
	ms, err := migrations(fsys)
	if err != nil {
		return fmt.Errorf("migrate: list: %w", err)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, q("MigrateLock"), migrationLockKey); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		if _, err := tx.Exec(ctx, q("MigrateSchemaTable")); err != nil {
			return fmt.Errorf("migrate: create schema_migrations: %w", err)
		}
		rows, err := tx.Query(ctx, q("MigrateApplied"))
		if err != nil {
			return fmt.Errorf("migrate: read schema_migrations: %w", err)
		}
		type record struct {
			version  string
			checksum *string
		}
		recs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (record, error) {
			var rec record
			return rec, r.Scan(&rec.version, &rec.checksum)
		})
		if err != nil {
			return fmt.Errorf("migrate: read schema_migrations: %w", err)
		}
		applied := make(map[string]*string, len(recs)) // version → recorded checksum (nil: none)
		for _, r := range recs {
			applied[r.version] = r.checksum
		}
		var edited []error
		for _, m := range ms {
			if sum := applied[m.version]; sum != nil && *sum != m.checksum {
				edited = append(edited, fmt.Errorf("migration %s was edited after it was applied: "+
					"schema_migrations records sha256 %s, the file has %s; restore the file and add a new migration instead", m.file, *sum, m.checksum))
			}
		}
		if len(edited) > 0 {
			return fmt.Errorf("migrate: %w", errors.Join(edited...))
		}
		ran := map[string]bool{} // applied in this run
		for _, m := range ms {
			if _, ok := applied[m.version]; ok {
				continue
			}
			if _, err := tx.Exec(ctx, string(m.body)); err != nil {
				return fmt.Errorf("migrate: apply %s: %w", m.version, err)
			}
			if _, err := tx.Exec(ctx, q("MigrateRecord"), m.version); err != nil {
				return fmt.Errorf("migrate: record %s: %w", m.version, err)
			}
			ran[m.version] = true
		}
		versions, sums := make([]string, len(ms)), make([]string, len(ms))
		for i, m := range ms {
			versions[i], sums[i] = m.version, m.checksum
		}
		if _, err := tx.Exec(ctx, q("MigrateRecordChecksums"), versions, sums); err != nil {
			return fmt.Errorf("migrate: record checksums: %w", err)
		}
		if _, err := tx.Exec(ctx, functionsSQL); err != nil {
			return fmt.Errorf("migrate: apply functions.sql: %w", err)
		}
		if ran["015_dlq_fingerprint"] {
			if _, err := tx.Exec(ctx, q("MigrateBackfillFingerprints")); err != nil {
				return fmt.Errorf("migrate: fingerprint the dead jobs (015_dlq_fingerprint): %w", err)
			}
		}
		return nil
	})
}
