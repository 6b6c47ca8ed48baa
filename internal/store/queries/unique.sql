-- The statements of unique.go, each named after the function that runs it.

-- name: JobUniqueClaimLock
-- Takes the row of each key ($1, in byte order), creating it if need be:
-- the upsert waits for a concurrent claimer of the key to commit, and
-- leaves the row locked until this transaction ends.
INSERT INTO job_unique_claims AS c (unique_key)
SELECT k FROM unnest($1::bytea[]) WITH ORDINALITY AS t(k, ord) ORDER BY ord
ON CONFLICT (unique_key) DO UPDATE SET job_id = c.job_id

-- name: JobUniqueClaimLive
-- The keys whose claim holds: in its window, and its job (not deleted) in
-- one of its states. A statement after the lock's, so its snapshot sees
-- what the previous claimer committed.
SELECT c.unique_key, c.job_id FROM job_unique_claims c JOIN jobs j ON j.id = c.job_id
WHERE c.unique_key = ANY($1) AND c.expires_at > statement_timestamp() AND j.status = ANY(c.states)

-- name: JobUniqueSetClaims
-- $3 holds each key's states joined by commas. A key without a job
-- ($2 NULL) gets an expired claim, which the clean-up deletes.
UPDATE job_unique_claims c SET job_id = u.job_id, states = string_to_array(u.states, ','),
    expires_at = CASE WHEN u.job_id IS NULL THEN '-infinity'
                      ELSE statement_timestamp() + u.ms * interval '1 millisecond' END
FROM unnest($1::bytea[], $2::bigint[], $3::text[], $4::bigint[]) AS u(k, job_id, states, ms)
WHERE c.unique_key = u.k

-- name: JobUniqueSetCleanup
-- Up to $1 expired claims, skipping any another submission holds: it runs
-- last, once this transaction holds every row it waits for, so it never
-- waits itself.
DELETE FROM job_unique_claims WHERE unique_key IN (
    SELECT unique_key FROM job_unique_claims WHERE expires_at <= statement_timestamp()
    ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
