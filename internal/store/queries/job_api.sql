-- The statements of job_api.go, each named after the function that runs it.

-- name: jobColumns
-- The columns scanJob reads, in its order.
id, name, queue, priority, payload, status, attempts, max_retries, timeout_seconds,
    coalesce(idempotency_key, ''), coalesce(last_error, ''), errors, result, coalesce(worker_id, ''),
    coalesce(lease_token, 0), cancel_requested, created_at, started_at, finished_at, next_run_at,
    progress::int, coalesce(progress_message, ''), coalesce(limit_key, ''), coalesce(dead_reason, ''),
    lease_expires_at, lease_extensions, coalesce(last_lease_token, 0)

-- name: JobInsertKeyedLookup
SELECT id, idempotency_key FROM jobs WHERE idempotency_key = ANY($1)

-- name: jobInsertSelect
-- limit_key (migration 013): the concurrency key if the job has one, else
-- 'name:<name>' when a limit on its name exists now, else NULL. The
-- uncorrelated EXISTS is an InitPlan, run once per statement, so while no
-- name has a limit no row looks further.
INSERT INTO jobs (name, queue, priority, payload, max_retries, timeout_seconds, idempotency_key, next_run_at,
                  status, callback, limit_key)
SELECT name, queue, prio, payload::jsonb, retries, timeout, key,
       coalesce(run_at, now() + delay_ms * interval '1 millisecond'), status, callback,
       CASE WHEN ckey IS NOT NULL THEN ckey
            WHEN NOT (SELECT EXISTS (SELECT 1 FROM limits l WHERE starts_with(l.key, 'name:'))) THEN NULL
            WHEN EXISTS (SELECT 1 FROM limits l WHERE l.key = 'name:' || t.name) THEN 'name:' || t.name
       END
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::int[], $6::int[], $7::text[], $8::timestamptz[], $9::bigint[],
            $10::text[], $11::boolean[], $12::text[])
     WITH ORDINALITY AS t(name, queue, prio, payload, retries, timeout, key, run_at, delay_ms, status, callback, ckey, ord)
ORDER BY ord

-- name: JobInsertRows
{{jobInsertSelect}}
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, idempotency_key, limit_key IS NOT NULL

-- name: JobInsertRowsUnkeyed
-- No row has an idempotency key: no ON CONFLICT clause, because with one
-- PostgreSQL inserts every row speculatively (a lock and an extra WAL
-- record per row, whether or not the row has a key), which made a
-- 1,000-row insert 1.5-2.5x slower (docs/benchmarks.md).
{{jobInsertSelect}}
RETURNING id, idempotency_key, limit_key IS NOT NULL

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

-- name: DeadListPage
SELECT {{jobColumns}}, coalesce(dead_reason, ''), coalesce(error_fingerprint, '') FROM jobs
    WHERE status = 'failed' AND ($1::timestamptz IS NULL OR (finished_at, id) < ($1, $2))
    ORDER BY finished_at DESC, id DESC LIMIT $3

-- name: DeadGroups
-- The dead jobs by name and error fingerprint, the $1 largest groups
-- (ties: the most recently failed first), each with its newest failure,
-- its newest job (the highest id) and that job's error as a sample; with
-- the number of groups and of dead jobs in all. The groups are read from
-- jobs_dead_groups_idx alone (an index-only scan, in group order, where the
-- visibility map allows); the samples are $1 primary-key look-ups.
WITH g AS (
    SELECT name, error_fingerprint AS fp, count(*) AS n, max(finished_at) AS last_at, max(id) AS newest
    FROM jobs WHERE status = 'failed'
    GROUP BY name, error_fingerprint
), top AS (
    SELECT g.*, count(*) OVER () AS groups, sum(g.n) OVER ()::bigint AS dead FROM g
    ORDER BY g.n DESC, g.last_at DESC NULLS LAST, g.name, g.fp LIMIT $1
)
SELECT top.name, top.fp, top.n, top.last_at, top.newest, coalesce(j.last_error, ''), top.groups, top.dead
FROM top LEFT JOIN jobs j ON j.id = top.newest
ORDER BY top.n DESC, top.last_at DESC NULLS LAST, top.name, top.fp

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
SELECT count(*), coalesce(extract(epoch FROM now() - min(next_run_at)), 0)::float8
    FROM jobs WHERE status IN ('pending', 'retrying') AND next_run_at <= now()

-- name: StatsGetWorkers
SELECT state, count(*) FROM workers GROUP BY state

-- name: StatsGetSeqscanOff
-- The due and unhandled counts read only waiting jobs: jobs_queue_due_idx
-- holds exactly those (jobs_due_idx only those without a limit_key); a
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
