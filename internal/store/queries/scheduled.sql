-- The statements of scheduled.go, each named after the function that runs it.

-- name: JobListScheduled
-- $1, $2: the cursor (NULL: from the soonest).
SELECT {{jobColumns}} FROM jobs
    WHERE status IN ('pending', 'retrying') AND next_run_at > now()
        AND ($1::timestamptz IS NULL OR (next_run_at, id) > ($1, $2))
    ORDER BY next_run_at, id LIMIT $3

-- name: JobRunNow
UPDATE jobs SET next_run_at = now()
    WHERE id = $1 AND status IN ('pending', 'retrying') AND next_run_at > now()
