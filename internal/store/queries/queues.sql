-- The statements of queues.go, each named after the function that runs it.

-- name: QueueSettingsList
-- Only the queues whose rows change dispatch: a queue resumed and uncapped
-- is dispatched as if it had no row.
SELECT name, paused, concurrency, updated_at FROM queues
    WHERE paused OR concurrency > 0 ORDER BY name

-- name: QueueSetPaused
INSERT INTO queues (name, paused) VALUES ($1, $2)
    ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()
    RETURNING name, paused, concurrency, updated_at

-- name: QueueSetConcurrency
INSERT INTO queues (name, concurrency) VALUES ($1, $2)
    ON CONFLICT (name) DO UPDATE SET concurrency = EXCLUDED.concurrency, updated_at = now()
    RETURNING name, paused, concurrency, updated_at

-- name: QueueStatsListSeqscanOff
-- Each branch of QueueStatsList reads one partial index (the waiting, the
-- leased, the recently finished jobs); a sequential scan would read every
-- finished job too, most of the table.
SET LOCAL enable_seqscan = off

-- name: QueueStatsList
-- Every queue that holds waiting, running or dead jobs, jobs finished in
-- the last minute, or a row in queues: an idle queue holding only dead
-- jobs is listed too. Depth and the oldest age count due jobs only, as
-- jobs_in_queue does; pending counts every waiting job; dead counts the
-- failed jobs, whenever they failed (jobs_dead_groups_idx holds exactly those).
WITH counts AS (
    SELECT queue, sum(depth)::bigint AS depth, sum(pending)::bigint AS pending, max(oldest) AS oldest,
        sum(running)::bigint AS running, sum(completed)::bigint AS completed, sum(failed)::bigint AS failed,
        sum(dead)::bigint AS dead
    FROM (
        SELECT queue, count(*) FILTER (WHERE next_run_at <= now()) AS depth, count(*) AS pending,
            extract(epoch FROM now() - min(next_run_at) FILTER (WHERE next_run_at <= now()))::float8 AS oldest,
            0 AS running, 0 AS completed, 0 AS failed, 0 AS dead
        FROM jobs WHERE status IN ('pending', 'retrying') GROUP BY queue
        UNION ALL
        SELECT queue, 0, 0, NULL, count(*), 0, 0, 0 FROM jobs WHERE status = 'leased' GROUP BY queue
        UNION ALL
        SELECT queue, 0, 0, NULL, 0, count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'failed'), 0
        FROM jobs WHERE status IN ('completed', 'failed') AND finished_at > now() - interval '1 minute' GROUP BY queue
        UNION ALL
        SELECT queue, 0, 0, NULL, 0, 0, 0, count(*) FROM jobs WHERE status = 'failed' GROUP BY queue
    ) AS parts
    GROUP BY queue
)
SELECT coalesce(c.queue, s.name), coalesce(c.depth, 0), coalesce(c.pending, 0), coalesce(c.oldest, 0),
        coalesce(c.running, 0), coalesce(c.completed, 0), coalesce(c.failed, 0), coalesce(c.dead, 0),
        coalesce(s.paused, false), coalesce(s.concurrency, 0)
    FROM counts c FULL JOIN queues s ON s.name = c.queue
    ORDER BY 1
