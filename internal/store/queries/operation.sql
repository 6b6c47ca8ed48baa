-- The statements of operation.go, each named after the function that runs
-- it. An operation walks the jobs its filter selects by id, one batch per
-- transaction; the action statements are those of bulk.sql's, on a batch.

-- name: operationColumns
id, action, states, name, queue, fingerprint, state, matched, processed, affected, after_id, actor, audit_id, error,
    canceled_by, created_at, updated_at, finished_at

-- name: operationCountOf
-- The filter of one branch of OperationCount.
($2 = '' OR name = $2) AND ($3 = '' OR queue = $3) AND NOT ($4 AND cancel_requested)

-- name: OperationCount
-- The console's confirmation page runs it on every view. One count per
-- group of states, each on the partial index that holds them (a generic
-- plan cannot match status = ANY($1) to a partial index, so one count of
-- the whole filter scanned the whole table); a branch whose states $1
-- does not name is skipped by its one-time filter.
SELECT (SELECT count(*) FROM jobs WHERE $1 && ARRAY['pending', 'retrying']
            AND status IN ('pending', 'retrying') AND status = ANY($1) AND {{operationCountOf}})
     + (SELECT count(*) FROM jobs WHERE 'leased' = ANY($1) AND status = 'leased' AND {{operationCountOf}})
     + (SELECT count(*) FROM jobs WHERE 'waiting' = ANY($1) AND status = 'waiting' AND {{operationCountOf}})
     + (SELECT count(*) FROM jobs WHERE 'failed' = ANY($1) AND status = 'failed' AND {{operationCountOf}})
     + (SELECT count(*) FROM jobs WHERE $1 && ARRAY['completed', 'canceled']
            AND status IN ('completed', 'canceled') AND status = ANY($1) AND {{operationCountOf}})

-- name: OperationCountDeadGroup
-- OperationCount of one dead-letter group (name $2 and fingerprint $5;
-- only dead jobs have a fingerprint): a range of jobs_dead_groups_idx.
SELECT count(*) FROM jobs
    WHERE 'failed' = ANY($1) AND status = 'failed' AND name = $2 AND error_fingerprint = $5
        AND ($3 = '' OR queue = $3) AND NOT ($4 AND cancel_requested)

-- name: OperationCreate
INSERT INTO operations (action, states, name, queue, fingerprint, matched, actor, audit_id, owner, lease_until)
    VALUES ($1, $2, $3, $4, $10, $5, $6, nullif($7, 0), $8, now() + $9 * interval '1 millisecond')
    RETURNING {{operationColumns}}

-- name: OperationGet
SELECT {{operationColumns}} FROM operations WHERE id = $1

-- name: OperationList
SELECT {{operationColumns}} FROM operations ORDER BY id DESC LIMIT $1

-- name: OperationCancel
UPDATE operations SET state = 'canceled', canceled_by = $2, finished_at = now(), updated_at = now()
    WHERE id = $1 AND state = 'running' RETURNING {{operationColumns}}

-- name: OperationStepLock
SELECT action, states, name, queue, fingerprint, after_id, actor FROM operations
    WHERE id = $1 AND state = 'running' AND owner = $2 FOR UPDATE

-- name: OperationStepSelect
SELECT id FROM jobs
    WHERE id > $1 AND status = ANY($2) AND ($3 = '' OR name = $3) AND ($4 = '' OR queue = $4)
        AND NOT ($5 AND cancel_requested)
    ORDER BY id LIMIT $6 FOR UPDATE

-- name: OperationStepSelectDeadGroup
-- OperationStepSelect of one dead-letter group (name $3, fingerprint $7):
-- the next batch is a range of jobs_dead_groups_idx, in id order, so a
-- small group among many dead jobs costs a descent, not a walk of the
-- table.
SELECT id FROM jobs
    WHERE 'failed' = ANY($2) AND status = 'failed' AND name = $3 AND error_fingerprint = $7 AND id > $1
        AND ($4 = '' OR queue = $4) AND NOT ($5 AND cancel_requested)
    ORDER BY id LIMIT $6 FOR UPDATE

-- name: OperationStepProgress
UPDATE operations SET after_id = $2, processed = processed + $3, affected = affected + $4, updated_at = now(),
    lease_until = now() + $5 * interval '1 millisecond',
    state = CASE WHEN $6 THEN 'done' ELSE state END,
    finished_at = CASE WHEN $6 THEN now() END
    WHERE id = $1 RETURNING {{operationColumns}}

-- name: OperationApplyRequeue
-- JobRequeueDead's change, on a batch, with each job's timeline entry
-- (requeueEvents; $2 the operation's actor).
WITH u AS (
    UPDATE jobs SET status = 'pending', attempts = 0, next_run_at = now(),
        finished_at = NULL, dead_reason = NULL, cancel_requested = false, error_fingerprint = NULL
        WHERE id = ANY($1) AND status = 'failed' RETURNING id
), {{requeueEvents}}
SELECT count(*) FROM u

-- name: OperationApplyDelete
WITH d AS (
    DELETE FROM jobs WHERE id = ANY($1) AND status IN ('completed', 'failed', 'canceled') RETURNING id
), {{deleteJobEvents}}
SELECT count(*) FROM d

-- name: OperationApplyCancel
-- JobCancel's change, on a batch.
UPDATE jobs SET
    status = CASE WHEN status = 'leased' THEN status ELSE 'canceled' END,
    finished_at = CASE WHEN status = 'leased' THEN finished_at ELSE now() END,
    cancel_requested = true
WHERE id = ANY($1) AND status IN ('waiting', 'pending', 'retrying', 'leased')
RETURNING id, status, coalesce(CASE WHEN status = 'leased' THEN worker_id END, ''),
    coalesce(CASE WHEN status = 'leased' THEN lease_token END, 0)

-- name: OperationFail
UPDATE operations SET state = 'failed', error = $3, finished_at = now(), updated_at = now()
    WHERE id = $1 AND owner = $2 AND state = 'running'

-- name: OperationClaimStale
UPDATE operations SET owner = $1, lease_until = now() + $2 * interval '1 millisecond', updated_at = now()
    WHERE id = (SELECT id FROM operations WHERE state = 'running' AND lease_until < now()
                ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING {{operationColumns}}

-- name: OperationRelease
UPDATE operations SET lease_until = now() WHERE owner = $1 AND state = 'running'
