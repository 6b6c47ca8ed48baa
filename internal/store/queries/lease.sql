-- The statements of lease.go, each named after the function that runs it.

-- name: JobLeaseExtend
-- lease_extensions counts the extensions for the timeline in this same
-- UPDATE (no index holds either column, so the update stays HOT).
UPDATE jobs j SET lease_expires_at = clock_timestamp() + $3 * interval '1 millisecond',
    lease_extensions = j.lease_extensions + 1
FROM unnest($1::bigint[], $2::bigint[], $5::text[]) AS u(id, token, worker)
WHERE j.id = u.id AND j.status = $4 AND j.lease_token = u.token AND j.worker_id = u.worker
  AND j.lease_expires_at < clock_timestamp() + $3 * interval '0.5 millisecond'
  AND (j.timeout_seconds = 0
       OR j.started_at + j.timeout_seconds * interval '1 second' + $3 * interval '1 millisecond' > clock_timestamp())
  AND (SELECT dts_fence($6))

-- name: JobLeasesList
SELECT id, lease_token, coalesce(worker_id, '') FROM jobs WHERE status = 'leased'
