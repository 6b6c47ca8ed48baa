-- The claim as one server-side function, so that a dispatch round costs one
-- round trip (and one commit) instead of four (BEGIN, lock, update, COMMIT):
-- on a busy machine every round trip is a wake-up of two processes, and the
-- claim is on the path of every job's start.
--
-- It does what the two statements did: lock the due jobs in priority order
-- (SKIP LOCKED, so concurrent claimers never wait on each other), then lease
-- them by primary key, the i-th locked job to the i-th slot. The UPDATE needs
-- no state guard: the rows are locked by this transaction.
--
-- The plans are pinned to index scans and nested loops with SET clauses: a
-- session keeps the generic plan it made the first time (plan_cache_mode is
-- force_generic_plan), and one made while the table was nearly empty
-- seq-scans it, which costs 5 ms per claim at 50,000 rows (0.6 ms pinned)
-- until an ANALYZE invalidates it. Both statements have an index that fits
-- exactly: jobs_due_idx for the lock, the primary key for the update.
CREATE FUNCTION dts_claim_jobs(p_types text[], p_slots text[], p_lease_ms bigint)
RETURNS TABLE (id bigint, name text, queue text, payload jsonb, attempts integer, max_retries integer,
               timeout_seconds integer, lease_token bigint, worker_id text, created_at timestamptz)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    ids bigint[];
BEGIN
    ids := ARRAY(
        SELECT j.id FROM jobs j
        WHERE j.status IN ('pending', 'retrying') AND j.next_run_at <= now()
          AND (p_types IS NULL OR j.name = ANY(p_types))
        ORDER BY j.priority DESC, j.next_run_at, j.id
        LIMIT cardinality(p_slots)
        FOR UPDATE SKIP LOCKED);
    IF cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
        UPDATE jobs j SET status = 'leased', attempts = j.attempts + 1,
            lease_token = nextval('lease_token_seq'),
            lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
            worker_id = u.worker, started_at = now(), cancel_requested = false
        FROM unnest(ids, p_slots[1:cardinality(ids)]) AS u(id, worker)
        WHERE j.id = u.id
        RETURNING j.id, j.name, j.queue, j.payload, j.attempts, j.max_retries, j.timeout_seconds,
            j.lease_token, j.worker_id, j.created_at;
END
$$;
