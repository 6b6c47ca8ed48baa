-- The statements of dead_mirror.go, each named after the function that runs it.

-- name: DeadMirrorPage
SELECT id, name, queue, attempts, max_retries,
        left(coalesce(last_error, ''), $4), coalesce(dead_reason, ''), created_at, coalesce(finished_at, created_at)
    FROM jobs
    WHERE status = 'failed' AND ($1 OR (finished_at, id) < ($2, $3))
    ORDER BY finished_at DESC, id DESC LIMIT $5
