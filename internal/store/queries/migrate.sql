-- The statements of migrate.go, each named after the function that runs it.

-- name: MigrateLock
SELECT pg_advisory_lock($1)

-- name: MigrateUnlock
SELECT pg_advisory_unlock($1)

-- name: MigrateSchemaTable
CREATE TABLE IF NOT EXISTS schema_migrations (
    version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())

-- name: MigrateApplied
SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)

-- name: MigrateRecord
INSERT INTO schema_migrations (version) VALUES ($1)
