-- The Job page's timeline and attempts (docs/ui.md, "Job timeline";
-- docs/state_machine.md, "What a job remembers of its attempts").
--
-- Nothing here adds a row to the hot path (lease, completion, heartbeat):
--   - each ended attempt's entry in errors (written only on a failure, a
--     reclaim or a death: FailLeasedUpdate) now also carries its lease's
--     token, start, backoff, extension count and the state it led to;
--   - last_lease_token is the token of the last lease that ended (set by
--     the completion, failure and hand-back statements, which clear
--     lease_token: the CHECK keeps a token only on leased rows);
--   - lease_extensions counts the extensions of the current (or last)
--     lease, in the UPDATE that extends it (the same row, no index
--     touched); every claim resets it to 0.
-- Both columns are added without a rewrite (NULL, and a constant default).
ALTER TABLE jobs
    ADD COLUMN last_lease_token bigint,
    ADD COLUMN lease_extensions integer NOT NULL DEFAULT 0;

-- Rare events of a job that its row cannot hold: a result rejected as
-- stale (the leader's result applier, one INSERT per batch, at most 100
-- rows a batch and 100 rows a job; the rest are only counted in
-- dts_stale_results_total), and a lease handed back (release: the
-- attempt is not counted, so it leaves nothing in errors). detail holds
-- worker_id, token, attempt and the like, by kind. Deleted with their job
-- by the statement that deletes it (retention, DELETE /jobs/{id}, bulk
-- delete: the fragment deleteJobEvents), not by a foreign key: ON DELETE
-- CASCADE fires a trigger per deleted job, which made retention 40 %
-- slower. Writers insert rows only for jobs that exist.
CREATE TABLE job_events (
    job_id bigint      NOT NULL,
    at     timestamptz NOT NULL DEFAULT now(),
    kind   text        NOT NULL CHECK (kind IN ('stale_result', 'released')),
    detail jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX job_events_job_at_idx ON job_events (job_id, at);

-- The operator actions on one job (job.cancel, job.requeue, job.run_now),
-- which the audit log already records with the job's id as target_id:
-- the timeline reads them from here instead of copying them.
CREATE INDEX audit_log_job_idx ON audit_log (target_id, id) WHERE target_type = 'job';
