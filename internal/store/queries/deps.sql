-- The statements of deps.go, each named after the function that runs it.

-- name: JobInsertDepsLock
-- The parents named by id, locked against a concurrent transition to a
-- final state until the edges are committed.
SELECT id FROM jobs WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE

-- name: JobInsertDepsMark
UPDATE jobs SET has_dependents = true WHERE id = ANY($1) AND NOT has_dependents

-- name: JobInsertDepsEdges
INSERT INTO job_dependencies (parent, child)
SELECT parent, child FROM unnest($1::bigint[], $2::bigint[]) AS u(parent, child)
ON CONFLICT DO NOTHING

-- name: JobInsertDepsSettle
SELECT dts_settle_waiting($1)

-- name: JobInsertDepsStates
SELECT id, status FROM jobs WHERE id = ANY($1)
