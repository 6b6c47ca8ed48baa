-- The statements of result.go, each named after the function that runs it.

-- name: startedAt
-- The started_at a finished attempt records: the handler's start as its
-- worker reported it (u.started), kept between the lease time and now so
-- that a worker's skewed clock cannot put it outside the attempt. NULL
-- (unknown) keeps the lease time.
CASE WHEN u.started IS NULL THEN j.started_at
    ELSE least(greatest(u.started, j.started_at), now()) END

-- name: JobCompleteMany
-- last_lease_token keeps the ending lease's token for the timeline (SET
-- reads the row as it was, so j.lease_token is the old token).
UPDATE jobs j SET status = 'completed', result = u.result::jsonb, finished_at = now(),
    started_at = {{startedAt}},
    last_lease_token = j.lease_token, lease_token = NULL, lease_expires_at = NULL
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $5::timestamptz[], $6::text[]) AS u(id, token, result, started, worker)
WHERE j.id = u.id AND j.status = $4 AND j.lease_token = u.token AND j.worker_id = u.worker
  AND (SELECT dts_fence($7))
RETURNING j.id, u.token, j.name, coalesce(j.worker_id, ''), j.created_at, coalesce(j.started_at, j.created_at)

-- name: FailLeasedLock
SELECT id, lease_token, coalesce(worker_id, ''), attempts, max_retries, cancel_requested
    FROM jobs WHERE id = ANY($1) AND status = $2 AND (SELECT dts_fence($3)) ORDER BY id FOR UPDATE

-- name: FailLeasedUpdate
-- The one statement that appends to errors. Each entry is the ended
-- attempt: attempt, error, reason, worker_id, at (its end), and since
-- migration 014 token (its lease's), started (as started_at below),
-- extended (lease extensions), next_state (retrying, failed, canceled)
-- and, when retrying, retry_at (the end of the backoff). Older entries
-- lack the last five; readers take them as unknown.
-- error_fingerprint (migration 015): computed only for a job going to
-- 'failed' (the CASE evaluates the function for those rows alone); every
-- other outcome leaves it NULL, as it is on every job that is not dead.
UPDATE jobs j SET status = u.state,
    next_run_at = CASE WHEN u.state = 'retrying' THEN now() + u.delay_ms * interval '1 millisecond' ELSE j.next_run_at END,
    finished_at = CASE WHEN u.state = 'retrying' THEN NULL ELSE now() END,
    last_error = u.err,
    errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempts, 'error', u.err,
        'reason', u.reason, 'worker_id', j.worker_id, 'at', now(), 'token', j.lease_token,
        'started', {{startedAt}}, 'extended', j.lease_extensions, 'next_state', u.state)
        || CASE WHEN u.state = 'retrying'
                THEN jsonb_build_object('retry_at', now() + u.delay_ms * interval '1 millisecond')
                ELSE '{}' END),
    dead_reason = nullif(u.dead_why, ''),
    error_fingerprint = CASE WHEN u.state = 'failed' THEN dts_error_fingerprint(u.err) END,
    started_at = {{startedAt}},
    last_lease_token = j.lease_token, lease_token = NULL, lease_expires_at = NULL
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[], $9::timestamptz[])
    AS u(id, token, state, delay_ms, err, reason, dead_why, started)
WHERE j.id = u.id AND j.status = $8 AND j.lease_token = u.token
RETURNING j.id, u.token, j.name, j.queue, j.payload, j.status, j.attempts, j.max_retries, u.err,
    coalesce(nullif(u.dead_why, ''), u.reason), coalesce(j.worker_id, ''), j.errors,
    j.created_at, coalesce(j.started_at, j.created_at), u.delay_ms

-- name: JobReleaseMany
-- A hand-back leaves nothing in errors (the attempt does not count), so
-- it is recorded in job_events, in the same statement: hand-backs are
-- rare (a worker's shutdown, a failed delivery, a stopped worker).
WITH r AS (
    UPDATE jobs j SET
        status = CASE WHEN j.cancel_requested THEN 'canceled' ELSE 'pending' END,
        finished_at = CASE WHEN j.cancel_requested THEN now() END,
        attempts = greatest(j.attempts - 1, 0), next_run_at = now(),
        last_lease_token = j.lease_token, lease_token = NULL, lease_expires_at = NULL
    FROM unnest($1::bigint[], $2::bigint[], $4::text[]) AS u(id, token, worker)
    WHERE j.id = u.id AND j.status = $3 AND j.lease_token = u.token AND j.worker_id = u.worker
      AND (SELECT dts_fence($5))
    RETURNING j.id, u.token, u.worker, j.attempts, j.started_at, j.lease_extensions, j.status
), e AS (
    INSERT INTO job_events (job_id, kind, detail)
    SELECT r.id, 'released', jsonb_build_object('worker_id', r.worker, 'token', r.token, 'attempt', r.attempts + 1,
        'started', r.started_at, 'extended', r.lease_extensions, 'next_state', r.status)
    FROM r
)
SELECT id FROM r

-- name: JobProgressMany
-- status is not in the SET list: the dependency trigger (UPDATE OF status)
-- does not fire, and the row can be updated HOT (no indexed column changes).
UPDATE jobs j SET progress = u.pct, progress_message = nullif(u.msg, '')
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::int[], $5::text[]) AS u(id, token, worker, pct, msg)
WHERE j.id = u.id AND j.status = $6 AND j.lease_token = u.token AND j.worker_id = u.worker
  AND (SELECT dts_fence($7))

-- name: JobEventInsertStale
-- Results rejected as stale, for their jobs' timelines: only jobs that
-- exist (a result may name any id), and at most $7 of them per job in all,
-- so a worker that floods the stream fills no job's history. A result
-- that is the one that ended its lease, arriving again (the leader
-- re-applying its own partly committed batch, or reading a result again
-- after a failed acknowledgement), is no stale result: same lease, same
-- worker, and the lease ended by that outcome, not by a reclaim.
INSERT INTO job_events (job_id, kind, detail)
SELECT u.id, 'stale_result', jsonb_build_object('worker_id', u.worker, 'token', u.token, 'attempt', u.attempt,
    'outcome', u.outcome)
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::int[], $5::text[]) AS u(id, token, worker, attempt, outcome)
WHERE (SELECT dts_fence($6))
  AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = u.id)
  AND NOT EXISTS (SELECT 1 FROM jobs j
      WHERE j.id = u.id AND j.last_lease_token = u.token AND j.worker_id = u.worker AND (
          (u.outcome = 'completed' AND j.status = 'completed')
          OR (u.outcome IN ('completed', 'failed') AND j.errors -> -1 ->> 'token' = u.token::text
              AND j.errors -> -1 ->> 'reason' NOT IN ('worker_failure', 'lease_timeout'))
          OR (u.outcome = 'released' AND EXISTS (SELECT 1 FROM job_events e
              WHERE e.job_id = u.id AND e.kind = 'released' AND e.detail ->> 'token' = u.token::text))))
  AND (SELECT count(*) FROM (SELECT 1 FROM job_events e WHERE e.job_id = u.id AND e.kind = 'stale_result' LIMIT $7) AS c) < $7
