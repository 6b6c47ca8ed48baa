-- The statements of lease.go, each named after the function that runs it.

-- name: JobLeaseExtend
-- lease_extensions counts the extensions for the timeline in this same
-- UPDATE (no index holds either column, so the update stays HOT).
UPDATE jobs j SET lease_expires_at = clock_timestamp() + $3 * interval '1 millisecond',
    lease_extensions = j.lease_extensions + 1
-- The time limit counts from the handler's start: u.run_ms milliseconds
-- ago by the worker's report, or the lease's start (started_at) when the
-- worker did not say (-1); a handler that has not started (u.waiting) has
-- used none of it.
FROM unnest($1::bigint[], $2::bigint[], $5::text[], $7::boolean[], $8::bigint[]) AS u(id, token, worker, waiting, run_ms)
WHERE j.id = u.id AND j.status = $4 AND j.lease_token = u.token AND j.worker_id = u.worker
  AND j.lease_expires_at < clock_timestamp() + $3 * interval '0.5 millisecond'
  AND (j.timeout_seconds = 0 OR u.waiting
       OR (u.run_ms >= 0 AND u.run_ms < j.timeout_seconds * 1000::bigint + $3)
       OR (u.run_ms < 0
           AND j.started_at + j.timeout_seconds * interval '1 second' + $3 * interval '1 millisecond' > clock_timestamp()))
  AND (SELECT dts_fence($6))

-- name: JobLeasesList
SELECT id, lease_token, coalesce(worker_id, '') FROM jobs WHERE status = 'leased'
