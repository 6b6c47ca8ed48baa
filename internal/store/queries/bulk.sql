-- The statements of bulk.go, each named after the function that runs it.
-- A bulk action walks the jobs it selects by id, one batch per
-- transaction: JobBulkSelect locks a batch, then the action's statement
-- changes those of them still in a state it applies to.

-- name: JobBulkCount
SELECT count(*) FROM jobs
    WHERE status = ANY($1) AND ($2 = '' OR name = $2) AND NOT ($3 AND cancel_requested)

-- name: JobBulkSelect
SELECT id FROM jobs
    WHERE id > $1 AND status = ANY($2) AND ($3 = '' OR name = $3) AND NOT ($4 AND cancel_requested)
    ORDER BY id LIMIT $5 FOR UPDATE

-- name: JobBulkCancel
-- JobCancel's change, on many jobs.
UPDATE jobs SET
    status = CASE WHEN status = 'leased' THEN status ELSE 'canceled' END,
    finished_at = CASE WHEN status = 'leased' THEN finished_at ELSE now() END,
    cancel_requested = true
WHERE id = ANY($1) AND status IN ('waiting', 'pending', 'retrying', 'leased')
RETURNING id, status, coalesce(CASE WHEN status = 'leased' THEN worker_id END, ''),
    coalesce(CASE WHEN status = 'leased' THEN lease_token END, 0)

-- name: JobBulkRequeue
-- JobRequeueDead's change, on many jobs; each requeued job's timeline gets
-- action (requeueEvents), as a single requeue's audit row gives it.
WITH u AS (
    UPDATE jobs SET status = 'pending', attempts = 0, next_run_at = now(),
        finished_at = NULL, dead_reason = NULL, cancel_requested = false, error_fingerprint = NULL
        WHERE id = ANY($1) AND status = 'failed' RETURNING id
), {{requeueEvents}}
SELECT count(*) FROM u

-- name: JobBulkDelete
WITH d AS (
    DELETE FROM jobs WHERE id = ANY($1) AND status IN ('completed', 'failed', 'canceled') RETURNING id
), {{deleteJobEvents}}
SELECT count(*) FROM d

-- name: JobDelete
WITH d AS (
    DELETE FROM jobs WHERE id = $1 AND status IN ('completed', 'failed', 'canceled') RETURNING id, status
), {{deleteJobEvents}}
SELECT status FROM d

-- name: requeueEvents
-- Follows a CTE u (RETURNING id) of requeued jobs: each gets a job_events
-- row of kind operator, the action as a single requeue's audit row names
-- it, by the actor $2. readTimeline reads it as job.EventOperator.
ev AS (INSERT INTO job_events (job_id, kind, detail)
    SELECT id, 'operator', jsonb_build_object('action', 'job.requeue', 'actor', $2::text, 'result', 'ok') FROM u)
