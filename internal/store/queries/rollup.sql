-- The statements of rollup.go, each named after the function that runs it.

-- name: RollupWriteEnded
-- The jobs that ended in the minute that starts at $1, and those whose
-- latest attempt started in it, per name and bucket of submit-to-start
-- time (bucket NULL: not started in the minute): one scan of
-- jobs_finished_idx from $1 on and one of jobs_leased_idx, summed in a
-- hash table, no sort. store.RollupWrite makes the minute's rows from
-- them (rollupBucket says what a bucket holds). A retried attempt that
-- failed and now waits (retrying) is not among the started. completed
-- and failed count only the jobs that ended in the minute; failed means
-- dead-lettered.
WITH ended AS (
    SELECT name, status, finished_at < $1::timestamptz + interval '1 minute' AS in_minute,
        CASE WHEN started_at >= $1 AND started_at < $1::timestamptz + interval '1 minute' THEN started_at - created_at END AS wait
    FROM jobs WHERE status IN ('completed', 'failed', 'canceled') AND finished_at >= $1
    UNION ALL
    SELECT name, status, false, started_at - created_at FROM jobs
    WHERE status = 'leased' AND started_at >= $1 AND started_at < $1::timestamptz + interval '1 minute'
)
SELECT name,
    CASE WHEN wait IS NOT NULL
        THEN floor(ln(greatest(date_part('epoch', wait) * 1000, $2)) * $3)::integer END AS bucket,
    count(*) FILTER (WHERE in_minute AND status = 'completed'),
    count(*) FILTER (WHERE in_minute AND status = 'failed'),
    count(wait)
FROM ended
WHERE (in_minute AND status IN ('completed', 'failed')) OR wait IS NOT NULL
GROUP BY 1, 2

-- name: RollupWriteDue
-- The due jobs per name now, and the oldest one's wait in seconds: a scan
-- of jobs_queue_due_idx, which (unlike jobs_name_due_idx) holds the jobs with
-- a limit_key too.
SELECT name, count(*), date_part('epoch', now() - min(next_run_at)) FROM jobs
WHERE status IN ('pending', 'retrying') AND next_run_at <= now()
GROUP BY name

-- name: RollupWriteInsert
-- One minute's rows ($1), fenced by the leader's epoch ($2); rows already
-- written for that minute (by an earlier leader) are kept as they are.
INSERT INTO job_rollup (minute, name, completed, failed, started, start_p50_ms, start_p95_ms, queue_depth,
    oldest_pending_seconds)
SELECT $1, name, completed, failed, started, p50, p95, depth, oldest
FROM unnest($3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::float8[], $8::float8[], $9::bigint[],
            $10::float8[]) AS r(name, completed, failed, started, p50, p95, depth, oldest)
WHERE (SELECT dts_fence($2))
ON CONFLICT (minute, name) DO NOTHING

-- name: RollupCleanup
DELETE FROM job_rollup WHERE (SELECT dts_fence($2)) AND minute < now() - $1 * interval '1 millisecond'

-- name: RollupRange
-- The rows from $1 on, oldest first, for the console's charts.
SELECT minute, name, completed, failed, started, start_p50_ms, start_p95_ms, queue_depth, oldest_pending_seconds
    FROM job_rollup WHERE minute >= $1 ORDER BY minute, name
