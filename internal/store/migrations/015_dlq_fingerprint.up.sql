-- Dead-letter groups (docs/ui.md, "Dead letters"; docs/api.md, "Dead-letter
-- queue").
--
-- error_fingerprint: the normalised first line of the error a job died
-- with, dts_error_fingerprint(last_error) (functions.sql), so that "the same
-- error" groups together. Set by the statement that moves a job to
-- 'failed' (FailLeasedUpdate, the one path there: results, reclaims of dead
-- workers and of expired leases), cleared by a requeue; NULL for every job
-- that is not dead. A new nullable column without a default: no table
-- rewrite, and the jobs that complete never compute or store anything.
--
-- The failed rows already there are fingerprinted by Migrate right after
-- functions.sql (MigrateBackfillFingerprints in queries/migrate.sql): the
-- function does not exist yet while this file runs.
ALTER TABLE jobs ADD COLUMN error_fingerprint text;

-- The dead jobs by group, in the order a group's page lists them (newest
-- id first) and batches act on them (by id); finished_at rides along so
-- that the groups' counts and newest failure are read from the index alone
-- (an index-only scan, where the visibility map allows). Partial: only the
-- dead jobs are in it, so no other job's insert or update writes to it.
CREATE INDEX jobs_dead_groups_idx ON jobs (name, error_fingerprint, id) INCLUDE (finished_at)
    WHERE status = 'failed';

-- A background operation on one dead-letter group (POST /jobs/bulk with
-- "fingerprint", the console's "Requeue all" of a group) keeps its filter
-- here, so that a submitter taking it over selects the same jobs.
-- '' : no fingerprint filter. A constant default: no rewrite either.
ALTER TABLE operations ADD COLUMN fingerprint text NOT NULL DEFAULT '';
