-- The statements of cleanup.go, each named after the function that runs it.

-- name: JobCleanup
-- The batch's job_events go in the same statement (deleteJobEvents).
-- The DELETE's own WHERE repeats the subquery's test: the subquery picks
-- ids from the statement's snapshot, and when a picked row changes
-- meanwhile (a requeue of a dead job commits while the DELETE waits for
-- the row's lock) PostgreSQL re-checks only the DELETE's own conditions on
-- the row's new version, not the subquery's. So a job a requeue has just
-- made pending is kept (TestJobCleanupRacesRequeue).
--
-- A job that a batch callback still waiting depends on is kept until the
-- callback fires: its outcome is part of the callback's payload
-- (dts_dependency_outcomes), which a deleted job would silently leave out
-- (TestJobCleanupKeepsParentsOfWaitingCallback). The test is in the
-- subquery, so that a batch is filled with jobs it may delete. The jobs
-- kept are read from the waiting callbacks' side (jobs_waiting_idx, then
-- their edges by job_dependencies_child_idx), once per statement: a test
-- per deleted job from the parent's side was planned as a hash of every
-- edge in job_dependencies.
WITH d AS (
    DELETE FROM jobs WHERE (SELECT dts_fence($4)) AND id IN (
        SELECT id FROM (
            SELECT id, has_dependents FROM jobs
                WHERE status IN ('completed', 'canceled') AND finished_at < now() - $1 * interval '1 millisecond'
            UNION ALL
            SELECT id, has_dependents FROM jobs
                WHERE status = 'failed' AND finished_at < now() - $2 * interval '1 millisecond') f
        WHERE NOT (f.has_dependents AND f.id IN (
            SELECT dep.parent FROM jobs c JOIN job_dependencies dep ON dep.child = c.id
                WHERE c.status = 'waiting' AND c.callback))
        LIMIT $3)
      AND ((status IN ('completed', 'canceled') AND finished_at < now() - $1 * interval '1 millisecond')
           OR (status = 'failed' AND finished_at < now() - $2 * interval '1 millisecond'))
    RETURNING id
), {{deleteJobEvents}}
SELECT count(*) FROM d

-- name: deleteJobEvents
-- Every DELETE FROM jobs is a CTE d (RETURNING id) followed by this one,
-- which deletes the deleted jobs' job_events rows and their logs
-- (job_logs, job_log_drops). Not a foreign key with ON DELETE CASCADE:
-- that fires a trigger and a query per deleted job, which made a
-- retention batch 40 % slower (~3 µs a job) even with job_events empty.
e AS (DELETE FROM job_events WHERE job_id = ANY (ARRAY(SELECT id FROM d))),
el AS (DELETE FROM job_logs WHERE job_id = ANY (ARRAY(SELECT id FROM d))),
ed AS (DELETE FROM job_log_drops WHERE job_id = ANY (ARRAY(SELECT id FROM d)))
