package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
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
// schema_migrations, in file-name order, then functions.sql, in one
// transaction under a transaction-scoped advisory lock. It is safe to call
// from every process at start-up, through a pooler in transaction mode
// too: a session lock would be taken in whichever server session ran that
// statement, its unlock could run in another, and the lock would stay
// behind in the pooler's session and hang the next start. A migration that
// fails leaves nothing applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
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
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, version).Scan(&applied); err != nil {
				return fmt.Errorf("migrate: check %s: %w", version, err)
			}
			if applied {
				continue
			}
			sql, err := migrationFS.ReadFile(name)
			if err != nil {
				return fmt.Errorf("migrate: read %s: %w", version, err)
			}
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return fmt.Errorf("migrate: apply %s: %w", version, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, version); err != nil {
				return fmt.Errorf("migrate: record %s: %w", version, err)
			}
		}
		if _, err := tx.Exec(ctx, functionsSQL); err != nil {
			return fmt.Errorf("migrate: apply functions.sql: %w", err)
		}
		return nil
	})
}
