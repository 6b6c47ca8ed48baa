-- The statements of rollup.go, each named after the function that runs it.

-- name: RollupWrite
-- One minute's rows ($1, the start of a minute that has ended), fenced by
-- the leader's epoch ($2): the total row (name '') always, and one row per
-- name of the $3 busiest. Rows already written for that minute (by an
-- earlier leader) are kept as they are. Every scan is bounded by an
-- index: finished jobs by jobs_finished_idx from $1 on, leased ones by
-- jobs_leased_idx, due ones by jobs_queue_due_idx (which, unlike
-- jobs_due_idx, holds the jobs with a limit_key too). A retried attempt that
-- failed and now waits (retrying) is not among the started.
WITH finished AS (
    SELECT name, status FROM jobs
    WHERE status IN ('completed', 'failed') AND finished_at >= $1 AND finished_at < $1 + interval '1 minute'
), started AS (
    SELECT name, extract(epoch FROM started_at - created_at) * 1000 AS ms FROM jobs
    WHERE status IN ('completed', 'failed', 'canceled') AND finished_at >= $1
        AND started_at >= $1 AND started_at < $1 + interval '1 minute'
    UNION ALL
    SELECT name, extract(epoch FROM started_at - created_at) * 1000 FROM jobs
    WHERE status = 'leased' AND started_at >= $1 AND started_at < $1 + interval '1 minute'
), due AS (
    SELECT name, count(*) AS n, extract(epoch FROM now() - min(next_run_at)) AS oldest FROM jobs
    WHERE status IN ('pending', 'retrying') AND next_run_at <= now() GROUP BY name
), events AS (
    SELECT name, (status = 'completed')::int AS completed, (status = 'failed')::int AS failed, 0 AS started,
        NULL::float8 AS ms, 0 AS depth, NULL::float8 AS oldest FROM finished
    UNION ALL SELECT name, 0, 0, 1, ms, 0, NULL FROM started
    UNION ALL SELECT name, 0, 0, 0, NULL, n, oldest FROM due
), rolled AS (
    SELECT name, coalesce(sum(completed), 0) AS completed, coalesce(sum(failed), 0) AS failed,
        coalesce(sum(started), 0) AS started,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY ms) AS p95,
        coalesce(sum(depth), 0) AS depth, coalesce(max(oldest), 0) AS oldest
    FROM events GROUP BY GROUPING SETS ((name), ())
), ranked AS (
    SELECT *, row_number() OVER (PARTITION BY name IS NULL
        ORDER BY completed + failed + started + depth DESC, name) AS r
    FROM rolled
)
INSERT INTO job_rollup (minute, name, completed, failed, started, start_p50_ms, start_p95_ms, queue_depth,
    oldest_pending_seconds)
SELECT $1, coalesce(name, ''), completed, failed, started, p50, p95, depth, oldest FROM ranked
WHERE (SELECT dts_fence($2)) AND (name IS NULL OR r <= $3)
ON CONFLICT (minute, name) DO NOTHING

-- name: RollupCleanup
DELETE FROM job_rollup WHERE (SELECT dts_fence($2)) AND minute < now() - $1 * interval '1 millisecond'

-- name: RollupRange
-- The rows from $1 on, oldest first, for the console's charts.
SELECT minute, name, completed, failed, started, start_p50_ms, start_p95_ms, queue_depth, oldest_pending_seconds
    FROM job_rollup WHERE minute >= $1 ORDER BY minute, name
