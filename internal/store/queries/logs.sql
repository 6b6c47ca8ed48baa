-- The statements of logs.go, each named after the function that runs it.

-- name: JobLogAppendLines
-- The lines of results whose lease the job still holds (the token and the
-- worker match a leased row, under the current epoch), numbered in the
-- order given; a line already stored for the job (same time and message:
-- a batch applied again after a leader change) is not stored twice. The
-- attempt is the job's own count, not the worker's say. The workers'
-- dropped counts go to job_log_drops in the same statement, for the jobs
-- that got a line from it (so a batch applied again counts them once).
WITH u AS (
    SELECT u.* FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::timestamptz[], $5::text[], $6::text[])
        WITH ORDINALITY AS u(id, token, worker, at, level, message, n)
), ins AS (
    INSERT INTO job_logs (job_id, attempt, at, level, message)
    SELECT j.id, j.attempts, u.at, u.level, u.message
        FROM u JOIN jobs j ON j.id = u.id AND j.status = $8 AND j.lease_token = u.token AND j.worker_id = u.worker
        WHERE (SELECT dts_fence($9))
          AND NOT EXISTS (SELECT 1 FROM job_logs l WHERE l.job_id = u.id AND l.at = u.at AND l.message = u.message)
        ORDER BY u.n
    RETURNING job_id
)
INSERT INTO job_log_drops (job_id, attempt, dropped)
SELECT j.id, j.attempts, sum(x.dropped)
    FROM unnest($1::bigint[], $2::bigint[], $3::text[], $7::bigint[]) AS x(id, token, worker, dropped)
    JOIN jobs j ON j.id = x.id AND j.status = $8 AND j.lease_token = x.token AND j.worker_id = x.worker
    WHERE x.dropped > 0 AND x.id IN (SELECT job_id FROM ins)
    GROUP BY j.id, j.attempts
ON CONFLICT (job_id, attempt) DO UPDATE SET dropped = job_log_drops.dropped + EXCLUDED.dropped

-- name: JobLogAppendTrim
-- Keeps each attempt of the jobs $1 within $2 bytes and each job within
-- $3, dropping the oldest lines first, and counts what it dropped per
-- attempt. The job's bound counts only the lines its attempts' bounds
-- keep, newest first, so an earlier attempt's lines go first.
WITH sized AS (
    SELECT job_id, seq, attempt, octet_length(message) + $4 AS size,
        sum(octet_length(message) + $4) OVER (PARTITION BY job_id, attempt ORDER BY seq DESC) AS attempt_bytes
    FROM job_logs WHERE job_id = ANY($1)
), ranked AS (
    SELECT job_id, seq, attempt, attempt_bytes > $2 AS over,
        sum(CASE WHEN attempt_bytes > $2 THEN 0 ELSE size END) OVER (PARTITION BY job_id ORDER BY seq DESC) AS job_bytes
    FROM sized
), del AS (
    DELETE FROM job_logs l USING ranked r
        WHERE l.job_id = r.job_id AND l.seq = r.seq AND (r.over OR r.job_bytes > $3)
        RETURNING l.job_id, l.attempt
)
INSERT INTO job_log_drops (job_id, attempt, dropped)
SELECT job_id, attempt, count(*) FROM del GROUP BY job_id, attempt
ON CONFLICT (job_id, attempt) DO UPDATE SET dropped = job_log_drops.dropped + EXCLUDED.dropped

-- name: JobLogsGetJob
SELECT 1 FROM jobs WHERE id = $1

-- name: JobLogsGetLines
-- The job's lines after seq $2 (of attempt $3; 0: every attempt), oldest
-- first, at most $4.
SELECT seq, attempt, at, level, message FROM job_logs
    WHERE job_id = $1 AND seq > $2 AND ($3 = 0 OR attempt = $3)
    ORDER BY seq LIMIT $4

-- name: JobLogsGetDrops
SELECT attempt, dropped FROM job_log_drops WHERE job_id = $1 AND ($2 = 0 OR attempt = $2) ORDER BY attempt
