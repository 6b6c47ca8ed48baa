-- The statements of scheduled.go, each named after the function that runs it.

-- name: JobListScheduled
-- $1, $2: the cursor (NULL: from the soonest). The page's ids first, from
-- jobs_queue_due_idx alone (it holds next_run_at and id), then their rows: read
-- in one step, every waiting job ahead was fetched whole and sorted (90 ms
-- on a million jobs with 60,000 ahead; 25 ms this way).
SELECT {{jobColumns}} FROM jobs
    WHERE id IN (SELECT id FROM jobs
        WHERE status IN ('pending', 'retrying') AND next_run_at > now()
            AND ($1::timestamptz IS NULL OR (next_run_at, id) > ($1, $2))
        ORDER BY next_run_at, id LIMIT $3)
    ORDER BY next_run_at, id

-- name: JobRunNow
UPDATE jobs SET next_run_at = now()
    WHERE id = $1 AND status IN ('pending', 'retrying') AND next_run_at > now()
