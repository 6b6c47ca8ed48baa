-- The statements of worker.go, each named after the function that runs it.

-- name: workerColumns
id, job_types, concurrency, state, in_flight, coalesce(last_heartbeat_at, registered_at), last_assigned_at,
    host, version, drain_requested_at, coalesce(drain_requested_by, '')

-- name: WorkerSync
-- The drain columns are the submitter's (WorkerDrain): never written here.
WITH gone AS (
    UPDATE workers SET state = 'unavailable', in_flight = 0
    WHERE state <> 'unavailable' AND NOT (id = ANY($1)) AND (SELECT dts_fence($8))
)
INSERT INTO workers (id, job_types, concurrency, state, in_flight, last_heartbeat_at, last_assigned_at, host, version)
SELECT id, string_to_array(types, E'\x1f'), conc, state, inflight, beat, assigned, host, version
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::int[], $6::timestamptz[], $7::timestamptz[],
    $9::text[], $10::text[])
    AS u(id, types, conc, state, inflight, beat, assigned, host, version)
WHERE (SELECT dts_fence($8))
ON CONFLICT (id) DO UPDATE SET job_types = excluded.job_types, concurrency = excluded.concurrency,
    state = excluded.state, in_flight = excluded.in_flight, last_heartbeat_at = excluded.last_heartbeat_at,
    last_assigned_at = coalesce(excluded.last_assigned_at, workers.last_assigned_at),
    host = excluded.host, version = excluded.version

-- name: WorkerDelete
DELETE FROM workers WHERE id = $1 AND (SELECT dts_fence($2))

-- name: WorkerCleanup
DELETE FROM workers WHERE state = 'unavailable'
    AND coalesce(last_heartbeat_at, registered_at) < now() - $1 * interval '1 millisecond'
    AND (SELECT dts_fence($2))

-- name: WorkerList
SELECT {{workerColumns}} FROM workers ORDER BY id

-- name: WorkerGet
SELECT {{workerColumns}} FROM workers WHERE id = $1

-- name: WorkerDrain
UPDATE workers SET drain_requested_at = coalesce(drain_requested_at, now()),
    drain_requested_by = coalesce(drain_requested_by, $2)
    WHERE id = $1 RETURNING {{workerColumns}}

-- name: WorkerUndrain
UPDATE workers SET drain_requested_at = NULL, drain_requested_by = NULL
    WHERE id = $1 RETURNING {{workerColumns}}

-- name: WorkerDrainList
SELECT id FROM workers WHERE drain_requested_at IS NOT NULL ORDER BY id

-- name: WorkerLeasedJobs
-- jobs_leased_idx: the leased jobs only.
SELECT worker_id, array_agg(id ORDER BY id) FROM jobs
    WHERE status = 'leased' AND worker_id IS NOT NULL GROUP BY worker_id

-- name: WorkerJobTypes
-- Every job type some recorded worker names, in any state: a worker being
-- restarted still vouches for its names until retention deletes its row.
SELECT DISTINCT t.name FROM workers, unnest(job_types) AS t(name) ORDER BY 1
