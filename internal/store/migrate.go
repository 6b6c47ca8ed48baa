package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

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

// Migrate applies every embedded migration not yet recorded in
// schema_migrations, in file-name order, each in its own transaction, then
// functions.sql, all under an advisory lock. It is safe to call from every
// process at start-up.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, q("MigrateLock"), migrationLockKey); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), q("MigrateUnlock"), migrationLockKey) //nolint:errcheck // released with the session anyway
	if _, err := conn.Exec(ctx, q("MigrateSchemaTable")); err != nil {
		return fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	names, err := fs.Glob(migrationFS, "migrations/*.up.sql")
	if err != nil {
		return fmt.Errorf("migrate: list: %w", err)
	}
	sort.Strings(names)
	for _, name := range names {
		version := strings.TrimSuffix(strings.TrimPrefix(name, "migrations/"), ".up.sql")
		var applied bool
		if err := conn.QueryRow(ctx, q("MigrateApplied"), version).Scan(&applied); err != nil {
			return fmt.Errorf("migrate: check %s: %w", version, err)
		}
		if applied {
			continue
		}
		body, err := migrationFS.ReadFile(name)
		if err != nil {
			return fmt.Errorf("migrate: read %s: %w", version, err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return fmt.Errorf("migrate: begin %s: %w", version, err)
		}
		if _, err := tx.Exec(ctx, string(body)); err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("migrate: apply %s: %w", version, err)
		}
		if _, err := tx.Exec(ctx, q("MigrateRecord"), version); err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("migrate: record %s: %w", version, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("migrate: commit %s: %w", version, err)
		}
	}
	if _, err := conn.Exec(ctx, functionsSQL); err != nil {
		return fmt.Errorf("migrate: apply functions.sql: %w", err)
	}
	return nil
}
