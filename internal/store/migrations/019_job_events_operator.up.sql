-- A bulk requeue (POST /jobs/bulk, a background operation) records itself
-- on each requeued job's timeline: a job_events row of kind 'operator'
-- (the fragment requeueEvents, queries/bulk.sql), where a single requeue
-- has its own audit row. One audit row per job would bury GET
-- /admin/audit under a 100,000-job requeue; the bulk action keeps its one
-- audit row, and each job its event, deleted with the job like the others.
--
-- Every existing row passes the wider check, so it is added NOT VALID and
-- validated after: the validation does not block writers.
ALTER TABLE job_events DROP CONSTRAINT job_events_kind_check;
ALTER TABLE job_events ADD CONSTRAINT job_events_kind_check
    CHECK (kind IN ('stale_result', 'released', 'operator')) NOT VALID;
ALTER TABLE job_events VALIDATE CONSTRAINT job_events_kind_check;
