-- The statements of reclaim.go, each named after the function that runs it.

-- name: JobReclaimExpired
SELECT id, lease_token, coalesce(worker_id, '') FROM jobs
    WHERE status = 'leased' AND lease_expires_at < now() AND (SELECT dts_fence($1))
    ORDER BY lease_expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED
