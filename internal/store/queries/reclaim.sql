-- The statements of reclaim.go, each named after the function that runs it.

-- name: JobReclaimExpired
-- $2: the workers whose leases are not judged this time (alive, but the
-- leader has not yet extended their leases since a stall).
SELECT id, lease_token, coalesce(worker_id, '') FROM jobs
    WHERE status = 'leased' AND lease_expires_at < now() AND NOT (coalesce(worker_id, '') = ANY($2::text[]))
      AND (SELECT dts_fence($1))
    ORDER BY lease_expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED
