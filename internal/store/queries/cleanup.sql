-- The statements of cleanup.go, each named after the function that runs it.

-- name: JobCleanup
DELETE FROM jobs WHERE (SELECT dts_fence($4)) AND id IN (
    SELECT id FROM jobs WHERE status IN ('completed', 'canceled') AND finished_at < now() - $1 * interval '1 millisecond'
    UNION ALL
    SELECT id FROM jobs WHERE status = 'failed' AND finished_at < now() - $2 * interval '1 millisecond'
    LIMIT $3)
