-- Dependencies, batch callbacks and progress (docs/architecture.md,
-- "Dependencies").
--
-- A job with parents that are not all done is inserted 'waiting': it is in
-- no claim index (jobs_due_idx holds pending and retrying only), so the
-- claim's hot path does not change. The trigger dts_jobs_release_dependents
-- (functions.sql) moves it on when a parent reaches a final state.
ALTER TABLE jobs DROP CONSTRAINT jobs_status_check,
    ADD CONSTRAINT jobs_status_check
        CHECK (status IN ('waiting', 'pending', 'leased', 'retrying', 'completed', 'failed', 'canceled'));

-- has_dependents: some job names this one as a parent. The trigger fires
-- only for such rows (its WHEN), so a job nobody depends on pays nothing.
-- callback: a batch callback, released when every parent is final whatever
-- its outcome (not only completed), with the outcomes in its payload.
-- progress, progress_message: the latest a handler reported (0..100).
ALTER TABLE jobs
    ADD COLUMN has_dependents   boolean  NOT NULL DEFAULT false,
    ADD COLUMN callback         boolean  NOT NULL DEFAULT false,
    ADD COLUMN progress         smallint CHECK (progress BETWEEN 0 AND 100),
    ADD COLUMN progress_message text;

-- One row per (parent, child) edge. Parents existed when the child was
-- submitted, so the graph has no cycle. Retention deleting either end
-- deletes the edge.
CREATE TABLE job_dependencies (
    parent bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    child  bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    PRIMARY KEY (parent, child)
);
-- A child's parents (release checks, callback outcomes, the child's delete).
CREATE INDEX job_dependencies_child_idx ON job_dependencies (child, parent);
