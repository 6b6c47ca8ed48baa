-- The plain claim's index leads with the job name (docs/architecture.md,
-- "The path of one job"; docs/scaling.md, "Mixed fleets"). jobs_due_idx was ordered
-- by priority and due time only, so a claim for some names walked past
-- every waiting job of the others: behind a backlog of a million jobs of
-- one name whose workers were busy, each dispatch round read the whole
-- backlog (about 100 ms) to find the other names' jobs. Ordered by name
-- first, each name's due jobs are a range of their own; a claim for
-- several names reads each name's range and takes the best across them.
-- The index replaces jobs_due_idx (same predicate, one index per waiting
-- job as before), so an insert writes no more index entries.
--
-- On a large table, create the index first without blocking writes:
--   CREATE INDEX CONCURRENTLY jobs_name_due_idx ON jobs (name, priority DESC, next_run_at, id)
--       WHERE status IN ('pending', 'retrying') AND limit_key IS NULL;
-- (the one docs/operations.md asked operators of mixed fleets to create);
-- this migration then only drops the old one. An invalid index left by a
-- failed concurrent build is rebuilt.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE c.relname = 'jobs_name_due_idx' AND NOT i.indisvalid) THEN
        DROP INDEX jobs_name_due_idx;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS jobs_name_due_idx ON jobs (name, priority DESC, next_run_at, id)
    WHERE status IN ('pending', 'retrying') AND limit_key IS NULL;
DROP INDEX IF EXISTS jobs_due_idx;
