-- The statements of job_api.go, each named after the function that runs it.

-- name: jobColumns
-- The columns scanJob reads, in its order.
id, name, queue, priority, payload, status, attempts, max_retries, timeout_seconds,
    coalesce(idempotency_key, ''), coalesce(last_error, ''), errors, result, coalesce(worker_id, ''),
    coalesce(lease_token, 0), cancel_requested, created_at, started_at, finished_at, next_run_at,
    progress::int, coalesce(progress_message, ''), coalesce(limit_key, ''), coalesce(dead_reason, ''),
    lease_expires_at, lease_extensions, coalesce(last_lease_token, 0), coalesce(trace_parent, '')

-- name: JobGet
SELECT {{jobColumns}} FROM jobs WHERE id = $1

-- name: JobGetByKey
-- jobs_idempotency_key_idx: the console's key: search.
SELECT {{jobColumns}} FROM jobs WHERE idempotency_key = $1

-- name: JobList
SELECT {{jobColumns}} FROM jobs
    WHERE id < $1 AND ($2 = '' OR status = $2) AND ($3 = '' OR name = $3) AND ($5 = '' OR queue = $5)
    ORDER BY id DESC LIMIT $4

-- name: JobListDeadGroup
-- The jobs of one dead-letter group (a name and an error fingerprint;
-- only dead jobs have one), newest first: a descent of
-- jobs_dead_groups_idx, in id order, however rare the group. The
-- parameters are JobList's, $6 the fingerprint.
SELECT {{jobColumns}} FROM jobs
    WHERE status = 'failed' AND name = $3 AND error_fingerprint = $6 AND id < $1
        AND ($2 = '' OR $2 = 'failed') AND ($5 = '' OR queue = $5)
    ORDER BY id DESC LIMIT $4

-- name: JobSearchTop
SELECT coalesce(max(id), 0) + 1 FROM jobs

-- name: JobSearchStep
-- One step of a search (JobScan): the jobs with ids in [$6, $1) that
-- match the list's filters and the scan's tests, newest first: the
-- payload's JSON text holds $7; its value at path $9, as text, is $10;
-- the worker is $11; the last error holds $12 in any case. The id range
-- bounds the rows one step reads through jobs_pkey (no index serves
-- these tests), so a search answers in steps of a few tens of
-- milliseconds and can stop between two.
SELECT {{jobColumns}} FROM jobs
    WHERE id < $1 AND id >= $6 AND ($2 = '' OR status = $2) AND ($3 = '' OR name = $3) AND ($5 = '' OR queue = $5)
        AND ($8 = '' OR error_fingerprint = $8)
        AND ($7 = '' OR strpos(payload::text, $7) > 0)
        AND ($9::text[] IS NULL OR payload #>> $9::text[] = $10)
        AND ($11 = '' OR worker_id = $11)
        AND ($12 = '' OR strpos(lower(last_error), lower($12)) > 0)
    ORDER BY id DESC LIMIT $4

-- name: JobCancel
UPDATE jobs SET
    status = CASE WHEN status = 'leased' THEN status ELSE 'canceled' END,
    finished_at = CASE WHEN status = 'leased' THEN finished_at ELSE now() END,
    cancel_requested = true
WHERE id = $1 AND status IN ('waiting', 'pending', 'retrying', 'leased')
RETURNING status, coalesce(CASE WHEN status = 'leased' THEN worker_id END, ''),
    coalesce(CASE WHEN status = 'leased' THEN lease_token END, 0)

-- name: JobRequeueDead
-- $2: the payload to run it with (JSON text, checked by the caller), NULL
-- to keep the one it has.
UPDATE jobs SET status = 'pending', attempts = 0, next_run_at = now(),
    finished_at = NULL, dead_reason = NULL, cancel_requested = false, error_fingerprint = NULL,
    payload = coalesce($2::jsonb, payload)
    WHERE id = $1 AND status = 'failed'
