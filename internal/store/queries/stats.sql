-- The statements of stats.go, each named after the function that runs it.

-- name: JobCountState
SELECT count(*) FROM jobs WHERE status = $1

-- name: JobCountDueSeqscanOff
SET LOCAL enable_seqscan = off

-- name: JobCountDue
SELECT count(*) FROM (SELECT 1 FROM jobs
    WHERE status IN ('pending', 'retrying') AND next_run_at <= now() LIMIT $1) AS due

-- name: StatsGetSeqscanOn
SET LOCAL enable_seqscan = on

-- name: StatsGetByState
SELECT status, count(*) FROM jobs GROUP BY status

-- name: StatsGetDue
-- The due jobs, the oldest one's wait, and the oldest wait among the names
-- a live worker (available or busy) handles ("*" handles every name): a
-- misspelled name waits for ever and would otherwise be the headline.
WITH handled AS (
    SELECT DISTINCT t.name FROM workers, unnest(job_types) AS t(name) WHERE state IN ('available', 'busy')
)
SELECT count(*), coalesce(extract(epoch FROM now() - min(next_run_at)), 0)::float8,
    coalesce(extract(epoch FROM now() - min(next_run_at) FILTER (
        WHERE name IN (SELECT name FROM handled) OR EXISTS (SELECT 1 FROM handled WHERE handled.name = '*'))), 0)::float8
    FROM jobs WHERE status IN ('pending', 'retrying') AND next_run_at <= now()

-- name: StatsGetWorkers
SELECT state, count(*) FROM workers GROUP BY state

-- name: StatsGetSeqscanOff
-- The due and unhandled counts read only waiting jobs: jobs_queue_due_idx
-- holds exactly those (jobs_name_due_idx only those without a limit_key); a
-- sequential scan would read every finished job too (the due count took
-- 180 ms on a million jobs that way, 25 ms on an index).
SET LOCAL enable_seqscan = off

-- name: StatsGetUnhandled
-- Pending and retrying jobs by name, for names no live worker (available
-- or busy, as the leader last synced the table) handles; none when one
-- handles "*". The $1 largest by count, then name; the rest in one row
-- with a NULL name.
WITH handled AS (
    SELECT DISTINCT t.name FROM workers, unnest(job_types) AS t(name)
    WHERE state IN ('available', 'busy')
), unhandled AS (
    SELECT name, count(*) AS n FROM jobs
    WHERE status IN ('pending', 'retrying')
        AND NOT EXISTS (SELECT 1 FROM handled WHERE handled.name = '*')
        AND NOT EXISTS (SELECT 1 FROM handled WHERE handled.name = jobs.name)
    GROUP BY name
), ranked AS (
    SELECT name, n, row_number() OVER (ORDER BY n DESC, name) AS r FROM unhandled
)
SELECT CASE WHEN r <= $1 THEN name END, sum(n)::bigint FROM ranked GROUP BY 1

-- name: StatsGetStarved
-- Names whose oldest due job has waited longer than $1 seconds although a
-- worker that handles the name has a free slot (state available, as the
-- leader last synced the table; "*" handles every name): dispatch is not
-- serving them. Jobs with a limit_key and jobs of paused or capped queues
-- may wait for good reason and are left out. The $2 longest waits, with
-- their seconds.
WITH free AS (
    SELECT DISTINCT t.name FROM workers, unnest(job_types) AS t(name)
    WHERE state = 'available'
)
SELECT name, extract(epoch FROM now() - min(next_run_at))::float8 AS waited FROM jobs
WHERE status IN ('pending', 'retrying') AND limit_key IS NULL
    AND next_run_at <= now() - make_interval(secs => $1)
    AND queue NOT IN (SELECT name FROM queues WHERE paused OR concurrency > 0)
    AND (EXISTS (SELECT 1 FROM free WHERE free.name = '*')
        OR EXISTS (SELECT 1 FROM free WHERE free.name = jobs.name))
GROUP BY name ORDER BY waited DESC, name LIMIT $2
