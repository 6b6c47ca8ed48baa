-- The statements of job_insert.go, each named after the function that runs it.

-- name: JobInsertKeyedLookup
SELECT id, idempotency_key FROM jobs WHERE idempotency_key = ANY($1)

-- name: jobInsertSelect
-- $13, the trace parents, is NULL when no job has one: unnest pads it with
-- NULLs.
-- limit_key (migration 013): the concurrency key if the job has one, else
-- 'name:<name>' when a limit on its name exists now, else NULL. The
-- uncorrelated EXISTS is an InitPlan, run once per statement, so while no
-- name has a limit no row looks further.
INSERT INTO jobs (name, queue, priority, payload, max_retries, timeout_seconds, idempotency_key, next_run_at,
                  status, callback, limit_key, trace_parent)
SELECT name, queue, prio, payload::jsonb, retries, timeout, key,
       coalesce(run_at, now() + delay_ms * interval '1 millisecond'), status, callback,
       CASE WHEN ckey IS NOT NULL THEN ckey
            WHEN NOT (SELECT EXISTS (SELECT 1 FROM limits l WHERE starts_with(l.key, 'name:'))) THEN NULL
            WHEN EXISTS (SELECT 1 FROM limits l WHERE l.key = 'name:' || t.name) THEN 'name:' || t.name
       END,
       trace
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::int[], $6::int[], $7::text[], $8::timestamptz[], $9::bigint[],
            $10::text[], $11::boolean[], $12::text[], $13::text[])
     WITH ORDINALITY AS t(name, queue, prio, payload, retries, timeout, key, run_at, delay_ms, status, callback, ckey, trace, ord)
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
