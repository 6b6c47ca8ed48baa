-- The statements of limits.go, each named after the function that runs it.

-- name: LimitSet
INSERT INTO limits (key, concurrency, rate, period_seconds) VALUES ($1, $2, $3, $4)
    ON CONFLICT (key) DO UPDATE SET concurrency = EXCLUDED.concurrency, rate = EXCLUDED.rate,
        period_seconds = EXCLUDED.period_seconds, updated_at = now()
    RETURNING key, concurrency, rate, period_seconds, updated_at

-- name: LimitDelete
-- The key's recorded starts go with it: a limit set again starts afresh.
WITH gone AS (
    DELETE FROM limits WHERE key = $1 RETURNING key
), starts AS (
    DELETE FROM limit_starts WHERE key IN (SELECT key FROM gone)
)
SELECT count(*) FROM gone

-- name: LimitList
-- Running from jobs_limit_leased_idx, waiting from jobs_limit_due_idx: one
-- index range per key.
SELECT l.key, l.concurrency, l.rate, l.period_seconds, l.updated_at,
        (SELECT count(*) FROM jobs j WHERE j.status = 'leased' AND j.limit_key = l.key),
        (SELECT count(*) FROM jobs j WHERE j.status IN ('pending', 'retrying') AND j.limit_key = l.key)
    FROM limits l ORDER BY l.key

-- name: JobLimitedWaiting
SELECT EXISTS (SELECT 1 FROM jobs WHERE status IN ('pending', 'retrying') AND limit_key IS NOT NULL)
