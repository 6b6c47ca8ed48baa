-- Unique jobs (docs/api.md, "Unique jobs"; docs/architecture.md, "Unique
-- jobs").
--
-- One row per uniqueness key that a submission with unique_for claimed.
-- The key is a SHA-256 digest computed by the store (store.uniqueDigest):
-- of the job's name, queue and either its explicit unique_key or its
-- canonical payload. The claim holds while expires_at is in the future AND
-- the job it names is in one of its states; both are checked when the next
-- submission of the key arrives, so no job transition ever touches this
-- table and jobs without unique_for never read it.
--
-- The row is also the lock that makes two concurrent submissions of one key
-- create one job: each takes it (INSERT ... ON CONFLICT DO UPDATE) before it
-- checks the claim, in the transaction of its INSERT into jobs.
--
-- No foreign key to jobs: a deleted job simply holds no claim (the check
-- joins jobs), and retention's DELETEs pay nothing. Expired rows are
-- deleted a few at a time by the submissions that claim keys.
CREATE TABLE job_unique_claims (
    unique_key bytea       PRIMARY KEY,
    job_id     bigint,     -- NULL while the claiming transaction runs, or if it created no job
    states     text[]      NOT NULL DEFAULT '{}',
    expires_at timestamptz NOT NULL DEFAULT '-infinity'
);
-- The clean-up of expired claims, oldest first.
CREATE INDEX job_unique_claims_expires_idx ON job_unique_claims (expires_at);
