-- The statements of migrate.go, each named after the function that runs it.

-- name: MigrateLock
-- Transaction-scoped: released at commit or rollback, in the session that
-- took it, also behind a pooler in transaction mode.
SELECT pg_advisory_xact_lock($1)

-- name: MigrateSchemaTable
-- The table as it was first created; migration 006 adds checksum.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())

-- name: MigrateApplied
-- The checksum is read through to_jsonb because the column does not exist
-- before migration 006: NULL then, as for a row recorded without one.
SELECT version, to_jsonb(m) ->> 'checksum' FROM schema_migrations m

-- name: MigrateRecord
INSERT INTO schema_migrations (version) VALUES ($1)

-- name: MigrateRecordChecksums
-- Fills in the checksum of every recorded migration that has none: those
-- just applied, and on the first start after migration 006 those applied
-- before it. A recorded checksum is never overwritten.
UPDATE schema_migrations m SET checksum = u.checksum
FROM unnest($1::text[], $2::text[]) AS u(version, checksum)
WHERE m.version = u.version AND m.checksum IS NULL

-- name: MigrateBackfillFingerprints
-- Migration 015's backfill: the dead jobs there before it get their
-- fingerprint. It runs after functions.sql, which defines the function, in
-- the same transaction as the migration. One statement, not batches: the
-- migration's ALTER TABLE holds jobs' ACCESS EXCLUSIVE lock until Migrate
-- commits whatever happens, so batches would release nothing sooner; the
-- statement reads only the dead jobs (jobs_finished_idx), so its cost is
-- the DLQ's size, not the table's.
UPDATE jobs SET error_fingerprint = dts_error_fingerprint(last_error)
    WHERE status = 'failed' AND error_fingerprint IS NULL
