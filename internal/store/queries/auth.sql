-- The statements of auth.go, each named after the function that runs it.

-- name: apiKeyColumns
-- The columns scanAPIKey reads, in its order.
id, name, scopes, created_at, expires_at, revoked_at, last_used_at

-- name: AuditInsert
INSERT INTO audit_log (actor, action, target_type, target_id, details)
    VALUES ($1, $2, $3, $4, $5) RETURNING id

-- name: AuditSetOutcome
UPDATE audit_log SET details = details || $2::jsonb WHERE id = $1

-- name: AuditList
SELECT id, at, actor, action, target_type, target_id, details
    FROM audit_log WHERE id < $1 ORDER BY id DESC LIMIT $2

-- name: APIKeyInsert
INSERT INTO api_keys (name, hash, scopes, expires_at)
    VALUES ($1, $2, $3, CASE WHEN $4::bigint > 0 THEN now() + $4::bigint * interval '1 millisecond' END)
    RETURNING {{apiKeyColumns}}

-- name: APIKeyList
SELECT {{apiKeyColumns}} FROM api_keys ORDER BY id DESC

-- name: APIKeyRevokeLock
SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = $1 FOR UPDATE

-- name: APIKeyRevoke
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
    WHERE id = $1 RETURNING {{apiKeyColumns}}

-- name: APIKeyByHash
UPDATE api_keys SET last_used_at = now()
    WHERE hash = $1 RETURNING {{apiKeyColumns}}

-- name: WorkerCredentialInsert
INSERT INTO worker_credentials (worker_id, hash) VALUES ($1, $2)
    RETURNING id, worker_id, created_at, revoked_at

-- name: WorkerCredentialList
SELECT id, worker_id, created_at, revoked_at FROM worker_credentials ORDER BY id DESC

-- name: WorkerCredentialRevoke
UPDATE worker_credentials SET revoked_at = now() WHERE worker_id = $1 AND revoked_at IS NULL

-- name: WorkerCredentialHashes
SELECT worker_id, hash FROM worker_credentials WHERE revoked_at IS NULL
