-- Server-side functions. Unlike migrations, this file is applied on every
-- start (store.Migrate, after the migrations, in one transaction): edit it
-- in place. Each function is written with CREATE OR REPLACE; a change of
-- signature drops the old one first.

-- dts_fence(epoch) is the guard of every write a leader coordinator makes:
-- claims, results, releases, reclaims, lease extensions, retention and the
-- workers table. It takes advisory lock 727003 in shared mode until the
-- writing transaction ends, then raises SQLSTATE DTS01 (store:
-- job.ErrDeposed) unless p_epoch is still the current epoch. A new leader
-- takes the same lock exclusively before it bumps the epoch
-- (LeaderAcquireEpoch), so the take-over waits for every fenced
-- transaction in progress, and a fenced statement that starts after it
-- reads the new epoch (each statement of this function takes a fresh
-- snapshot): a write of a deposed leader is refused whole, never applied.
-- An advisory lock lives in the lock manager: unlike a row lock (FOR
-- SHARE, as at first) it writes nothing to the row, and concurrent holders
-- do not create MultiXacts; that row lock cost 7-9% of the drain and
-- sustained rates (docs/benchmarks.md). Transaction-scoped, it also works
-- behind a pooler in transaction mode.
-- Statements call it as (SELECT dts_fence($n)), an InitPlan run once.
CREATE OR REPLACE FUNCTION dts_fence(p_epoch bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(727003);
    PERFORM 1 FROM coordinator_leader WHERE id = 1 AND epoch = p_epoch;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leader epoch % is superseded', p_epoch USING ERRCODE = 'DTS01';
    END IF;
    RETURN true;
END
$$;

-- dts_end_stuck_fence(min_age_ms) ends the transactions that have held
-- the fence (lock 727003) for longer than min_age_ms, for a coordinator
-- taking over an expired lease (LeaderAcquire): a deposed leader frozen in
-- the middle of a write (stopped between two statements of a transaction,
-- or while PostgreSQL sends it a result) holds the fence until it wakes,
-- and LeaderAcquireEpoch would wait as long. Its writes are uncommitted,
-- so ending them loses nothing. A backend this role may not signal is
-- skipped (the take-over then waits for it, as before). Advisory locks
-- belong to their database: another dts on the same server is not this
-- one's to end.
CREATE OR REPLACE FUNCTION dts_end_stuck_fence(p_min_age_ms bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    holder integer;
    ended integer := 0;
BEGIN
    FOR holder IN SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.classid = 0 AND l.objid = 727003 AND l.objsubid = 1
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.granted AND l.pid <> pg_backend_pid()
          AND a.xact_start < clock_timestamp() - p_min_age_ms * interval '1 millisecond'
    LOOP
        BEGIN
            IF pg_terminate_backend(holder, 1000) THEN
                ended := ended + 1;
            END IF;
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;
        END;
    END LOOP;
    RETURN ended;
END
$$;

-- The lease and the three claims return trace_parent (migration 018): a
-- new column of a function's result is a change of its type, which CREATE
-- OR REPLACE refuses, so the four are dropped first, once, while they lack
-- it.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'dts_lease_jobs'
               AND NOT ('trace_parent' = ANY (proargnames))) THEN
        DROP FUNCTION IF EXISTS dts_lease_jobs(bigint[], text[], bigint[], bigint);
        DROP FUNCTION IF EXISTS dts_claim_jobs(bigint, text[], text[], bigint[], bigint);
        DROP FUNCTION IF EXISTS dts_claim_queue_jobs(bigint, text[], text[], integer[], text[], bigint[], bigint);
        DROP FUNCTION IF EXISTS dts_claim_limited_jobs(bigint, text[], text[], text[], bigint[], bigint);
    END IF;
END
$$;

-- dts_lease_jobs leases the jobs p_ids, which the calling claim has locked,
-- the i-th to the i-th slot (worker id) with the i-th fencing token, for
-- p_lease_ms, and returns what their deliveries need. The one lease
-- statement of the three claims (dts_claim_jobs, dts_claim_queue_jobs,
-- dts_claim_limited_jobs). The UPDATE needs no state guard: the rows are
-- locked by the caller's transaction. Pinned to the primary key like the
-- claims.
CREATE OR REPLACE FUNCTION dts_lease_jobs(p_ids bigint[], p_slots text[], p_tokens bigint[], p_lease_ms bigint)
RETURNS TABLE (id bigint, name text, queue text, payload jsonb, attempts integer, max_retries integer,
               timeout_seconds integer, lease_token bigint, worker_id text, created_at timestamptz,
               trace_parent text)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
        UPDATE jobs j SET status = 'leased', attempts = j.attempts + 1,
            lease_token = u.token,
            lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
            worker_id = u.worker, started_at = now(), cancel_requested = false, lease_extensions = 0
        FROM unnest(p_ids, p_slots[1:cardinality(p_ids)], p_tokens[1:cardinality(p_ids)]) AS u(id, worker, token)
        WHERE j.id = u.id
        RETURNING j.id, j.name, j.queue, j.payload, j.attempts, j.max_retries, j.timeout_seconds,
            j.lease_token, j.worker_id, j.created_at, j.trace_parent;
END
$$;

-- dts_waiting_queues is the queues that have waiting jobs, in queue
-- order, at most p_max of them (NULL: all): a loose scan of
-- jobs_queue_due_idx, one index descent per queue.
CREATE OR REPLACE FUNCTION dts_waiting_queues(p_max integer) RETURNS text[]
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
BEGIN
    RETURN ARRAY(
        WITH RECURSIVE d(q) AS (
            (SELECT j.queue FROM jobs j WHERE j.status IN ('pending', 'retrying') ORDER BY j.queue LIMIT 1)
            UNION ALL
            SELECT (SELECT j.queue FROM jobs j WHERE j.status IN ('pending', 'retrying') AND j.queue > d.q
                    ORDER BY j.queue LIMIT 1)
            FROM d WHERE d.q IS NOT NULL)
        SELECT d.q FROM d WHERE d.q IS NOT NULL LIMIT p_max);
END
$$;

-- dts_waiting_names is the names of the waiting jobs without a limit_key,
-- in name order, at most p_max of them (NULL: all): a loose scan of
-- jobs_name_due_idx, one index descent per name.
CREATE OR REPLACE FUNCTION dts_waiting_names(p_max integer) RETURNS text[]
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
BEGIN
    RETURN ARRAY(
        WITH RECURSIVE waiting(name) AS (
            (SELECT j.name FROM jobs j
             WHERE j.status IN ('pending', 'retrying') AND j.limit_key IS NULL
             ORDER BY j.name LIMIT 1)
            UNION ALL
            SELECT (SELECT j.name FROM jobs j
                    WHERE j.status IN ('pending', 'retrying') AND j.limit_key IS NULL AND j.name > w.name
                    ORDER BY j.name LIMIT 1)
            FROM waiting w WHERE w.name IS NOT NULL)
        SELECT w.name FROM waiting w WHERE w.name IS NOT NULL LIMIT p_max);
END
$$;

-- dts_lock_queue_walk is dts_lock_due_jobs's lock for a group of any name
-- (p_types NULL), or of every name that has waiting jobs (a worker
-- binary's handlers, with its mix of jobs), while they all wait in one
-- queue and no job with a limit key waits: one walk of that queue's range
-- of jobs_queue_due_idx in claim order, locked as read, as cheap as one
-- name's. (That index also holds limited jobs, which the walk would pass;
-- per name the claim reads about twice its jobs and locks them by primary
-- key: 9 ms instead of 6 for 1,000 jobs of 10 names.) NULL when the
-- group is not such a group.
CREATE OR REPLACE FUNCTION dts_lock_queue_walk(p_types text[], p_n integer) RETURNS bigint[]
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    queues text[];
BEGIN
    queues := dts_waiting_queues(2);
    IF cardinality(queues) <> 1
       OR EXISTS (SELECT 1 FROM jobs j WHERE j.status IN ('pending', 'retrying') AND j.limit_key IS NOT NULL)
       -- More waiting names than the group's are not all its: no need to
       -- find them all.
       OR NOT (p_types IS NULL OR dts_waiting_names(cardinality(p_types) + 1) <@ p_types) THEN
        RETURN NULL;
    END IF;
    -- "(limit_key IS NULL) IS TRUE" keeps jobs_name_due_idx out of this
    -- plan (as in dts_claim_queue_jobs); the name filter keeps out a job
    -- of another name submitted since the check.
    RETURN ARRAY(
        SELECT j.id FROM jobs j
        WHERE j.queue = queues[1] AND j.status IN ('pending', 'retrying') AND j.next_run_at <= now()
          AND (j.limit_key IS NULL) IS TRUE
          AND (p_types IS NULL OR j.name = ANY(p_types))
        ORDER BY j.priority DESC, j.next_run_at, j.id
        LIMIT p_n
        FOR UPDATE SKIP LOCKED);
END
$$;

-- dts_lock_due_jobs locks up to p_n due jobs without a limit_key of the
-- names p_types (NULL: any name) in claim order (priority, due time, id)
-- and returns their ids in that order. It is the lock of dts_claim_jobs
-- and dts_claim_group_jobs.
--
-- jobs_name_due_idx (migration 021) holds each name's waiting jobs in
-- claim order, so a claim reads only its own names' jobs, however many
-- of other names wait ahead of them:
--   - one name with due jobs (the usual case, and every drain of one
--     name): that name's range, locked as it is read (SKIP LOCKED);
--   - several: each name's best p_n (read in two steps: below), the
--     best p_n of those, then locked by primary key in that order (SKIP
--     LOCKED, due state checked again). Only the leader claims unlimited
--     jobs, one claim at a time, so all of them are almost always
--     locked; one changed meanwhile (canceled, say) is left out, and the
--     claim leases fewer;
--   - any name: the names with waiting jobs first, one index descent
--     each, then as for several;
--   - several names with due jobs, or any name, in a group that takes
--     every name with waiting jobs, in one queue, with no limited job
--     waiting: dts_lock_queue_walk, one walk of the queue in claim order.
-- Finding which names have due jobs costs one descent per name.
CREATE OR REPLACE FUNCTION dts_lock_due_jobs(p_types text[], p_n integer) RETURNS bigint[]
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    names text[] := p_types;
    cand bigint[];
    lim integer;
    most bigint;
BEGIN
    IF p_n <= 0 THEN
        RETURN '{}';
    END IF;
    IF names IS NULL THEN
        cand := dts_lock_queue_walk(NULL, p_n);
        IF cand IS NOT NULL THEN
            RETURN cand;
        END IF;
        names := dts_waiting_names(NULL);
    END IF;
    IF cardinality(names) > 1 THEN
        -- A LATERAL with LIMIT 1, not EXISTS: planned without statistics
        -- (a fresh install, a bulk load), EXISTS became a join that read
        -- every due job once per name (100 ms per claim at 200,000).
        names := ARRAY(
            SELECT t.name FROM unnest(names) AS t(name) CROSS JOIN LATERAL (
                SELECT 1 FROM jobs j
                WHERE j.status IN ('pending', 'retrying') AND j.limit_key IS NULL
                  AND j.next_run_at <= now() AND j.name = t.name
                LIMIT 1) AS due);
    END IF;
    IF coalesce(cardinality(names), 0) = 0 THEN
        RETURN '{}';
    END IF;
    IF cardinality(names) = 1 THEN
        RETURN ARRAY(
            SELECT j.id FROM jobs j
            WHERE j.status IN ('pending', 'retrying') AND j.limit_key IS NULL AND j.next_run_at <= now()
              AND j.name = names[1]
            ORDER BY j.priority DESC, j.next_run_at, j.id
            LIMIT p_n
            FOR UPDATE SKIP LOCKED);
    END IF;
    IF p_types IS NOT NULL THEN
        cand := dts_lock_queue_walk(p_types, p_n);
        IF cand IS NOT NULL THEN
            RETURN cand;
        END IF;
    END IF;
    -- First each name's best lim, about twice its even share: the best
    -- p_n of those are the best p_n of all unless some name had all its
    -- lim among them (it may have more that belong there); then each
    -- name's best p_n. A mix of names reads about 2 p_n rows, not p_n
    -- per name.
    lim := least(p_n, (2 * p_n + cardinality(names) - 1) / cardinality(names) + 2);
    WITH top AS (
        SELECT c.name, c.id, c.priority, c.next_run_at FROM unnest(names) AS t(name) CROSS JOIN LATERAL (
            SELECT j.name, j.id, j.priority, j.next_run_at FROM jobs j
            WHERE j.status IN ('pending', 'retrying') AND j.limit_key IS NULL AND j.next_run_at <= now()
              AND j.name = t.name
            ORDER BY j.priority DESC, j.next_run_at, j.id
            LIMIT lim) c
        ORDER BY c.priority DESC, c.next_run_at, c.id
        LIMIT p_n)
    SELECT ARRAY(SELECT top.id FROM top ORDER BY top.priority DESC, top.next_run_at, top.id),
           (SELECT max(g.n) FROM (SELECT count(*) AS n FROM top GROUP BY top.name) g)
    INTO cand, most;
    IF lim < p_n AND most >= lim THEN
        cand := ARRAY(
            SELECT c.id FROM unnest(names) AS t(name) CROSS JOIN LATERAL (
                SELECT j.id, j.priority, j.next_run_at FROM jobs j
                WHERE j.status IN ('pending', 'retrying') AND j.limit_key IS NULL AND j.next_run_at <= now()
                  AND j.name = t.name
                ORDER BY j.priority DESC, j.next_run_at, j.id
                LIMIT p_n) c
            ORDER BY c.priority DESC, c.next_run_at, c.id
            LIMIT p_n);
    END IF;
    -- Each row by its primary key (a LATERAL, so that a plan made without
    -- statistics cannot join the ids against a scan of every due job).
    RETURN ARRAY(
        SELECT l.id FROM unnest(cand) WITH ORDINALITY AS u(id, o) CROSS JOIN LATERAL (
            SELECT j.id FROM jobs j
            WHERE j.id = u.id
              AND j.status IN ('pending', 'retrying') AND j.limit_key IS NULL AND j.next_run_at <= now()
            FOR UPDATE SKIP LOCKED) AS l
        ORDER BY u.o);
END
$$;

-- dts_claim_jobs leases due jobs to free slots in one round trip (and one
-- commit) instead of four (BEGIN, lock, update, COMMIT): on a busy machine
-- every round trip is a wake-up of two processes, and the claim is on the
-- path of every job's start.
--
-- It locks the due jobs in priority order (dts_lock_due_jobs: SKIP
-- LOCKED, so concurrent claimers never wait on each other), then leases
-- them by primary key, the i-th locked job to the i-th slot with the i-th
-- fencing token. The tokens come from the coordinator (crypto/rand, 63
-- bits): unguessable, so a worker cannot forge another worker's result.
-- The UPDATE needs no state guard: the rows are locked by this
-- transaction. The leader's epoch is checked first (dts_fence).
--
-- The plans are pinned to index scans and nested loops with SET clauses: a
-- session keeps the generic plan it made the first time (plan_cache_mode is
-- force_generic_plan), and one made while the table was nearly empty
-- seq-scans it, which costs 5 ms per claim at 50,000 rows (0.6 ms pinned)
-- until an ANALYZE invalidates it. Every statement has an index that fits
-- exactly: jobs_name_due_idx for the lock, the primary key for the update.
--
-- Jobs with a limit_key (migration 013) are not in jobs_name_due_idx and
-- not claimed here: dts_claim_limited_jobs claims them. The lock's WHERE
-- says limit_key IS NULL so that it matches the index's predicate.
DROP FUNCTION IF EXISTS dts_claim_jobs(text[], text[], bigint);
CREATE OR REPLACE FUNCTION dts_claim_jobs(p_epoch bigint, p_types text[], p_slots text[], p_tokens bigint[],
                                          p_lease_ms bigint)
RETURNS TABLE (id bigint, name text, queue text, payload jsonb, attempts integer, max_retries integer,
               timeout_seconds integer, lease_token bigint, worker_id text, created_at timestamptz,
               trace_parent text)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    ids bigint[];
BEGIN
    PERFORM dts_fence(p_epoch);
    ids := dts_lock_due_jobs(p_types, cardinality(p_slots));
    IF cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM dts_lease_jobs(ids, p_slots, p_tokens, p_lease_ms);
END
$$;

-- dts_claim_group_jobs is dts_claim_jobs for several groups of slots at
-- once, in one round trip and one commit: a fleet of workers with
-- different job names is one group per set of names, and a claim per group
-- cost a commit and two round trips per group per dispatch round, for the
-- few slots each group freed since the last.
--
-- Group g takes the names p_types[p_type_ends[g-1]+1 : p_type_ends[g]]
-- (any name when p_any[g]) and the slots p_slots[p_slot_ends[g-1]+1 :
-- p_slot_ends[g]] (p_*_ends[0] is 0), and leases its due jobs in priority
-- order up to its slots, each job to a slot of its group. The groups'
-- names must not overlap, and a group of any name must be alone (the
-- caller checks). Each group's lock reads only its own names' jobs
-- (dts_lock_due_jobs). (One statement for all the groups of one name, a
-- LATERAL lock per group, was no faster for 50 groups of 4 workers.)
CREATE OR REPLACE FUNCTION dts_claim_group_jobs(p_epoch bigint, p_types text[], p_type_ends integer[], p_any boolean[],
                                                p_slots text[], p_slot_ends integer[], p_tokens bigint[],
                                                p_lease_ms bigint)
RETURNS TABLE (id bigint, name text, queue text, payload jsonb, attempts integer, max_retries integer,
               timeout_seconds integer, lease_token bigint, worker_id text, created_at timestamptz,
               trace_parent text)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    ids bigint[] := '{}';
    slots text[] := '{}';
    got bigint[];
    types text[];
    type_lo integer := 0;
    slot_lo integer := 0;
BEGIN
    PERFORM dts_fence(p_epoch);
    FOR g IN 1 .. cardinality(p_slot_ends) LOOP
        types := CASE WHEN p_any[g] THEN NULL ELSE p_types[type_lo + 1 : p_type_ends[g]] END;
        got := dts_lock_due_jobs(types, p_slot_ends[g] - slot_lo);
        ids := ids || got;
        slots := slots || p_slots[slot_lo + 1 : slot_lo + cardinality(got)];
        type_lo := p_type_ends[g];
        slot_lo := p_slot_ends[g];
    END LOOP;
    IF cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM dts_lease_jobs(ids, slots, p_tokens, p_lease_ms);
END
$$;

-- dts_claim_queue_jobs is the claim once queues are configured: some queue
-- paused or capped (table queues), or the slots' workers serve named queues
-- with weights (WORKER_QUEUES). The coordinator calls dts_claim_jobs above,
-- unchanged, whenever none of that is so; this function is the only place
-- that costs anything per queue.
--
-- p_queues are the queues to claim from, NULL for every queue that has a
-- waiting job (found with a loose scan of jobs_queue_due_idx: one index
-- descent per queue). p_shares, when not NULL, is how many of the slots
-- each of p_queues gets first (the coordinator's weighted split); a queue
-- whose share is 0 is only served from what the others leave.
--
--   1. Each queue's room is read in this transaction: 0 when paused, its
--      cap minus its jobs leased now when capped (one leader claims, one
--      claim at a time, each after dts_fence: the count cannot be raced),
--      else every slot.
--   2. Shares: each queue in turn locks up to min(share, room) of its due
--      jobs, in priority, due-time, id order.
--   3. The slots left go to the due jobs of every queue with room left, in
--      priority, due-time, id order across the queues: each queue offers
--      its best min(room, slots left) from its index, the best of those
--      are locked. So no slot stays empty while a queue that may run has
--      due work, and no queue goes over its cap.
--
-- Then the same UPDATE as dts_claim_jobs, the i-th locked job to the i-th
-- slot. Plans are pinned to indexes in the same way.
--
-- Jobs with a limit_key are left to dts_claim_limited_jobs, which honours
-- pauses and caps too. jobs_queue_due_idx still holds them (it is the
-- index the counts of waiting jobs read), so a queue's limited jobs ahead
-- of its others are walked past here.
CREATE OR REPLACE FUNCTION dts_claim_queue_jobs(p_epoch bigint, p_types text[], p_queues text[], p_shares integer[],
                                                p_slots text[], p_tokens bigint[], p_lease_ms bigint)
RETURNS TABLE (id bigint, name text, queue text, payload jsonb, attempts integer, max_retries integer,
               timeout_seconds integer, lease_token bigint, worker_id text, created_at timestamptz,
               trace_parent text)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    n     integer := cardinality(p_slots);
    qs    text[];
    room  integer[];
    ids   bigint[] := '{}';
    got   bigint[];
    gotq  integer[];
    g     integer;
    lft   integer;
BEGIN
    PERFORM dts_fence(p_epoch);
    IF n = 0 THEN
        RETURN;
    END IF;
    IF p_queues IS NULL THEN
        qs := dts_waiting_queues(NULL);
    ELSE
        qs := p_queues;
    END IF;
    IF cardinality(qs) = 0 THEN
        RETURN;
    END IF;

    -- Each queue's room, in one statement for all of them: n, none when
    -- paused, or what its cap leaves (a queues row exists only for a
    -- paused or capped queue, or one that was).
    room := ARRAY(
        SELECT CASE
            WHEN s.name IS NULL THEN n
            WHEN s.paused THEN 0
            WHEN s.concurrency > 0 THEN greatest(0, least(n, s.concurrency -
                (SELECT count(*) FROM jobs j WHERE j.status = 'leased' AND j.queue = u.q)))::integer
            ELSE n END
        FROM unnest(qs) WITH ORDINALITY AS u(q, o) LEFT JOIN queues s ON s.name = u.q
        ORDER BY u.o);

    -- The shares, also in one statement: each queue's first jobs, up to
    -- its share and its room, in queue order. The shares add up to n (the
    -- dispatcher splits the slots), so the LIMIT only guards that.
    --
    -- "(k.limit_key IS NULL) IS TRUE", here and in the second pass, keeps
    -- jobs_name_due_idx (whose predicate says limit_key IS NULL) out of these
    -- per-queue scans: with statistics older than the backlog (a new
    -- table, a bulk load before autovacuum's ANALYZE) the planner took it
    -- and filtered by queue, reading the whole due backlog once per queue
    -- (1.9 s instead of 10 ms for 1,000 queues, TestQueueClaimPlanWithoutStatistics).
    IF p_shares IS NOT NULL THEN
        SELECT coalesce(array_agg(t.id ORDER BY t.i, t.priority DESC, t.next_run_at, t.id), '{}'),
               coalesce(array_agg(t.i ORDER BY t.i, t.priority DESC, t.next_run_at, t.id), '{}')
        INTO ids, gotq
        FROM (
            SELECT c.id, s.i, c.priority, c.next_run_at FROM generate_subscripts(qs, 1) AS s(i)
            CROSS JOIN LATERAL (
                SELECT k.id, k.priority, k.next_run_at FROM jobs k
                WHERE k.queue = qs[s.i] AND k.status IN ('pending', 'retrying') AND k.next_run_at <= now()
                  AND (k.limit_key IS NULL) IS TRUE
                  AND (p_types IS NULL OR k.name = ANY(p_types))
                ORDER BY k.priority DESC, k.next_run_at, k.id
                LIMIT greatest(0, least(coalesce(p_shares[s.i], 0), room[s.i]))
                FOR UPDATE SKIP LOCKED) c
            ORDER BY s.i, c.priority DESC, c.next_run_at, c.id
            LIMIT n) t;
        FOREACH g IN ARRAY gotq LOOP
            room[g] := room[g] - 1;
        END LOOP;
    END IF;

    lft := n - cardinality(ids);
    IF lft > 0 THEN
        got := ARRAY(
            SELECT j.id FROM jobs j
            WHERE j.id IN (
                SELECT c.id FROM generate_subscripts(qs, 1) AS s(i)
                CROSS JOIN LATERAL (
                    SELECT k.id, k.priority, k.next_run_at FROM jobs k
                    WHERE k.queue = qs[s.i] AND k.status IN ('pending', 'retrying') AND k.next_run_at <= now()
                      AND (k.limit_key IS NULL) IS TRUE
                      AND (p_types IS NULL OR k.name = ANY(p_types)) AND k.id <> ALL(ids)
                    ORDER BY k.priority DESC, k.next_run_at, k.id
                    LIMIT least(room[s.i], lft)) c
                ORDER BY c.priority DESC, c.next_run_at, c.id
                LIMIT lft)
              AND j.status IN ('pending', 'retrying') AND j.next_run_at <= now()
            ORDER BY j.priority DESC, j.next_run_at, j.id
            FOR UPDATE OF j SKIP LOCKED);
        ids := ids || got;
    END IF;
    IF cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM dts_lease_jobs(ids, p_slots, p_tokens, p_lease_ms);
END
$$;

-- dts_claim_limited_jobs claims jobs that have a limit_key (a concurrency
-- key, or 'name:<name>' when their name had a limit at submit time;
-- docs/architecture.md, "Limits"). The coordinator calls it beside the
-- plain claim (or the claim by queue), for a share of a group's slots,
-- only while its copy says such jobs are waiting; jobs without a
-- limit_key never come here.
--
--   1. The keys with waiting jobs: a loose scan of jobs_limit_due_idx, one
--      index descent per key.
--   2. Each key's room, read in this transaction: every slot, less, when
--      its row in limits has a concurrency, that minus its jobs leased now
--      (jobs_limit_leased_idx), and less, when it has a rate, that minus
--      its starts within the last period_seconds (limit_starts). Only the
--      leader claims, one claim at a time, each after dts_fence: neither
--      count can be raced, so a limit holds across the whole cluster.
--   3. Queues: a paused queue's jobs are skipped; a capped queue takes at
--      most its cap minus its jobs leased now, as in dts_claim_queue_jobs.
--      p_queues, when not NULL, are the only queues the slots' workers
--      serve.
--   4. Each key offers its best min(room, slots) due jobs from its index;
--      the best of those, in priority, due-time, id order, are locked.
--   5. The starts of rate-limited keys are recorded (limit_starts), and
--      the starts older than their key's period deleted, in this same
--      transaction; then the same UPDATE as dts_claim_jobs.
CREATE OR REPLACE FUNCTION dts_claim_limited_jobs(p_epoch bigint, p_types text[], p_queues text[],
                                                  p_slots text[], p_tokens bigint[], p_lease_ms bigint)
RETURNS TABLE (id bigint, name text, queue text, payload jsonb, attempts integer, max_retries integer,
               timeout_seconds integer, lease_token bigint, worker_id text, created_at timestamptz,
               trace_parent text)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    n      integer := cardinality(p_slots);
    ks     text[];
    room   integer[];
    paused text[];
    cq     text[] := '{}';
    croom  integer[] := '{}';
    ids    bigint[];
    q      record;
BEGIN
    PERFORM dts_fence(p_epoch);
    IF n = 0 THEN
        RETURN;
    END IF;
    ks := ARRAY(
        WITH RECURSIVE d(k) AS (
            (SELECT j.limit_key FROM jobs j
             WHERE j.status IN ('pending', 'retrying') AND j.limit_key IS NOT NULL ORDER BY j.limit_key LIMIT 1)
            UNION ALL
            SELECT (SELECT j.limit_key FROM jobs j
                    WHERE j.status IN ('pending', 'retrying') AND j.limit_key IS NOT NULL AND j.limit_key > d.k
                    ORDER BY j.limit_key LIMIT 1)
            FROM d WHERE d.k IS NOT NULL)
        SELECT d.k FROM d WHERE d.k IS NOT NULL);
    IF cardinality(ks) = 0 THEN
        RETURN;
    END IF;

    DELETE FROM limit_starts s WHERE s.key = ANY(ks) AND NOT EXISTS (
        SELECT 1 FROM limits l
        WHERE l.key = s.key AND l.rate > 0 AND s.at > now() - l.period_seconds * interval '1 second');

    -- Each key's room (its concurrency less its leased jobs, its rate less
    -- its starts within the period; a key with no limits row has room for
    -- every slot), in one statement: with thousands of keys waiting, a
    -- statement per key made this claim cost seconds. Full keys are
    -- dropped here, so the claim below visits only keys with room.
    SELECT coalesce(array_agg(r.k ORDER BY r.ord), '{}'), coalesce(array_agg(r.room ORDER BY r.ord), '{}')
      INTO ks, room
      FROM (SELECT u.k, u.ord, least(n,
                CASE WHEN l.concurrency > 0 THEN l.concurrency -
                    (SELECT count(*) FROM jobs j WHERE j.status = 'leased' AND j.limit_key = u.k)::integer
                ELSE n END,
                CASE WHEN l.rate > 0 THEN l.rate -
                    (SELECT count(*) FROM limit_starts s
                     WHERE s.key = u.k AND s.at > now() - l.period_seconds * interval '1 second')::integer
                ELSE n END) AS room
            FROM unnest(ks) WITH ORDINALITY AS u(k, ord)
            LEFT JOIN limits l ON l.key = u.k) r
     WHERE r.room > 0;
    IF cardinality(ks) = 0 THEN
        RETURN;
    END IF;

    paused := ARRAY(SELECT s.name FROM queues s WHERE s.paused);
    FOR q IN SELECT s.name, s.concurrency FROM queues s WHERE s.concurrency > 0 AND NOT s.paused LOOP
        cq := cq || q.name;
        croom := croom || greatest(0, q.concurrency -
            (SELECT count(*) FROM jobs j WHERE j.status = 'leased' AND j.queue = q.name)::integer);
    END LOOP;

    ids := ARRAY(
        SELECT j.id FROM jobs j
        WHERE j.id IN (
            SELECT c.id FROM (
                SELECT c.id, c.priority, c.next_run_at, c.queue,
                    row_number() OVER (PARTITION BY c.queue ORDER BY c.priority DESC, c.next_run_at, c.id) AS qn
                FROM generate_subscripts(ks, 1) AS s(i)
                CROSS JOIN LATERAL (
                    SELECT k.id, k.priority, k.next_run_at, k.queue FROM jobs k
                    WHERE k.limit_key = ks[s.i] AND k.status IN ('pending', 'retrying') AND k.next_run_at <= now()
                      AND (p_types IS NULL OR k.name = ANY(p_types))
                      AND (p_queues IS NULL OR k.queue = ANY(p_queues))
                      AND k.queue <> ALL(paused)
                    ORDER BY k.priority DESC, k.next_run_at, k.id
                    LIMIT room[s.i]) c
                WHERE room[s.i] > 0) c
            WHERE c.qn <= coalesce(croom[array_position(cq, c.queue)], n)
            ORDER BY c.priority DESC, c.next_run_at, c.id
            LIMIT n)
          AND j.status IN ('pending', 'retrying') AND j.next_run_at <= now()
        ORDER BY j.priority DESC, j.next_run_at, j.id
        FOR UPDATE OF j SKIP LOCKED);
    IF cardinality(ids) = 0 THEN
        RETURN;
    END IF;

    INSERT INTO limit_starts (key, at)
        SELECT j.limit_key, now() FROM jobs j JOIN limits l ON l.key = j.limit_key
        WHERE j.id = ANY(ids) AND l.rate > 0;
    RETURN QUERY SELECT * FROM dts_lease_jobs(ids, p_slots, p_tokens, p_lease_ms);
END
$$;

-- Dependencies (docs/architecture.md, "Dependencies"). A waiting job
-- (status 'waiting', in no claim index) has rows in job_dependencies naming
-- its parents. dts_settle_waiting decides what becomes of each waiting job
-- of p_children, whose rows it locks in id order:
--
--   - an ordinary child is canceled as soon as one parent is failed or
--     canceled (dead_reason dependency_failed or dependency_canceled,
--     last_error naming that parent), and made pending once every parent is
--     completed;
--   - a batch callback (callback = true) is made pending once every parent
--     is final, whatever its outcome, with its payload replaced by
--     {"payload": <as submitted>, "jobs": dts_dependency_outcomes(id)}.
--
-- A parent deleted by retention no longer counts (its edge went with it).
-- Canceling a child fires the trigger below on the child in turn, so a
-- cancel cascades down the graph in the same transaction. The submitter
-- calls it for the jobs it has just inserted waiting (their parents may be
-- final already); the trigger calls it for a parent's children.
CREATE OR REPLACE FUNCTION dts_settle_waiting(p_children bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    c   record;
    bad record;
BEGIN
    FOR c IN SELECT j.id, j.callback FROM jobs j
             WHERE j.id = ANY(p_children) AND j.status = 'waiting' ORDER BY j.id FOR UPDATE
    LOOP
        IF c.callback THEN
            IF NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs p ON p.id = d.parent
                           WHERE d.child = c.id AND p.status NOT IN ('completed', 'failed', 'canceled')) THEN
                UPDATE jobs SET status = 'pending', next_run_at = greatest(next_run_at, now()),
                    payload = jsonb_build_object('payload', payload, 'jobs', dts_dependency_outcomes(c.id))
                WHERE id = c.id;
            END IF;
            CONTINUE;
        END IF;
        SELECT p.id, p.status INTO bad FROM job_dependencies d JOIN jobs p ON p.id = d.parent
            WHERE d.child = c.id AND p.status IN ('failed', 'canceled') ORDER BY p.id LIMIT 1;
        IF FOUND THEN
            UPDATE jobs SET status = 'canceled', finished_at = now(), dead_reason = 'dependency_' || bad.status,
                last_error = format('parent job %s %s', bad.id,
                                    CASE bad.status WHEN 'failed' THEN 'failed' ELSE 'was canceled' END)
            WHERE id = c.id;
        ELSIF NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs p ON p.id = d.parent
                          WHERE d.child = c.id AND p.status <> 'completed') THEN
            UPDATE jobs SET status = 'pending', next_run_at = greatest(next_run_at, now()) WHERE id = c.id;
        END IF;
    END LOOP;
END
$$;

-- dts_dependency_outcomes is what a batch callback receives: each parent's
-- id (a decimal string, as the API shows ids), name, final status, result
-- (left out, with "result_omitted": true, when its JSON text is over 8 KiB:
-- GET /jobs/{id} has it) and last error, in id order (the batch's order).
CREATE OR REPLACE FUNCTION dts_dependency_outcomes(p_child bigint) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(
        jsonb_build_object('job_id', p.id::text, 'name', p.name, 'status', p.status,
            'result', CASE WHEN octet_length(p.result::text) <= 8192 THEN p.result END, 'error', p.last_error)
        || CASE WHEN octet_length(p.result::text) > 8192 THEN '{"result_omitted": true}'::jsonb ELSE '{}'::jsonb END
        ORDER BY p.id), '[]'::jsonb)
    FROM job_dependencies d JOIN jobs p ON p.id = d.parent WHERE d.child = p_child
$$;

-- The trigger covers every path to a final state (results, reclaims,
-- releases, cancel), in the transaction of the statement that got there.
-- Its WHEN keeps it off the hot path: it fires only for a job some other
-- job depends on (has_dependents) whose status just became final.
CREATE OR REPLACE FUNCTION dts_jobs_release_dependents() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM dts_settle_waiting(ARRAY(SELECT d.child FROM job_dependencies d WHERE d.parent = NEW.id));
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER jobs_release_dependents AFTER UPDATE OF status ON jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents AND NEW.status IN ('completed', 'failed', 'canceled')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION dts_jobs_release_dependents();

-- dts_error_fingerprint is the rule that makes "the same error" of
-- different dead jobs group together (the console's Dead letters groups,
-- the fingerprint filter of lists and bulk actions): the first line of the
-- error that is not blank, with what varies from one occurrence to the
-- next replaced by placeholders, in this order:
--
--   control characters          a space
--   "…", '…', `…` quoted text   <str> (a ' right after a letter or digit
--                               is an apostrophe, not a quote)
--   scheme://… (less a trailing punctuation mark)   <url>
--   user@host.domain            <email>
--   UUIDs                       <uuid>
--   [IPv6] and IPv4 addresses, with their :port   <ip>
--   0x…, and words of 6 or more hex digits holding both a letter and a
--   digit (ids, hashes)         <hex>
--   Go durations (1m30.5s, 250ms) and "30 seconds"   <dur>
--   other numbers               <n>
--
-- then runs of whitespace become one space, the ends are trimmed and the
-- result is cut to 200 characters; an empty result is '<empty>'. So a
-- fingerprint is never NULL or empty and holds no control character (the
-- API's text checks accept it as a filter value). Only the first 500
-- characters of the line are read, which bounds the work per error.
--
-- It is called only for a job going to 'failed' (FailLeasedUpdate) and by
-- the backfill of migration 015. TestErrorFingerprint compares examples.
-- Changing the rule changes the groups of the jobs that die from then on;
-- the dead jobs keep their stored fingerprint unless a migration
-- fingerprints them again (UPDATE jobs SET error_fingerprint =
-- dts_error_fingerprint(last_error) WHERE status = 'failed').
CREATE OR REPLACE FUNCTION dts_error_fingerprint(p_error text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    s text := coalesce(substring(p_error FROM '[^\r\n]*\S[^\r\n]*'), '');
BEGIN
    s := left(s, 500);
    s := regexp_replace(s, '[[:cntrl:]]', ' ', 'g');
    s := regexp_replace(s, '"[^"]*"', '<str>', 'g');
    s := regexp_replace(s, '(^|[^[:alnum:]])''[^'']*''', '\1<str>', 'g');
    s := regexp_replace(s, '`[^`]*`', '<str>', 'g');
    s := regexp_replace(s, '\m[A-Za-z][A-Za-z0-9+.-]*://[^\s<>]*[^]\s<>.,;:!?)]', '<url>', 'g');
    s := regexp_replace(s, '[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+', '<email>', 'g');
    s := regexp_replace(s, '\m[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\M', '<uuid>', 'g');
    s := regexp_replace(s, '\[[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*\](:[0-9]+)?', '<ip>', 'g');
    s := regexp_replace(s, '\m[0-9]{1,3}(\.[0-9]{1,3}){3}(:[0-9]+)?\M', '<ip>', 'g');
    s := regexp_replace(s, '\m0[xX][0-9A-Fa-f]+\M', '<hex>', 'g');
    s := regexp_replace(s, '\m(?=[0-9]*[A-Fa-f])(?=[A-Fa-f]*[0-9])[0-9A-Fa-f]{6,}\M', '<hex>', 'g');
    s := regexp_replace(s, '\m([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+\M', '<dur>', 'g');
    s := regexp_replace(s, '\m[0-9]+(\.[0-9]+)? ?(nanoseconds?|microseconds?|milliseconds?|seconds?|secs?|minutes?|mins?|hours?|days?)\M',
                        '<dur>', 'g');
    s := regexp_replace(s, '[0-9]+(\.[0-9]+)?', '<n>', 'g');
    s := left(btrim(regexp_replace(s, '\s+', ' ', 'g')), 200);
    IF s = '' THEN
        RETURN '<empty>';
    END IF;
    RETURN s;
END
$$;
