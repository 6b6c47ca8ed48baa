-- The statements of claim.go, each named after the function that runs it.

-- name: JobClaimBatch
SELECT id, name, queue, payload, attempts, max_retries, timeout_seconds,
        lease_token, worker_id, created_at, coalesce(trace_parent, '')
    FROM dts_claim_jobs($1, $2, $3, $4, $5)

-- name: JobClaimGroups
SELECT id, name, queue, payload, attempts, max_retries, timeout_seconds,
        lease_token, worker_id, created_at, coalesce(trace_parent, '')
    FROM dts_claim_group_jobs($1, $2, $3, $4, $5, $6, $7, $8)

-- name: JobClaimQueues
SELECT id, name, queue, payload, attempts, max_retries, timeout_seconds,
        lease_token, worker_id, created_at, coalesce(trace_parent, '')
    FROM dts_claim_queue_jobs($1, $2, $3, $4, $5, $6, $7)

-- name: JobClaimLimited
SELECT id, name, queue, payload, attempts, max_retries, timeout_seconds,
        lease_token, worker_id, created_at, coalesce(trace_parent, '')
    FROM dts_claim_limited_jobs($1, $2, $3, $4, $5, $6)
