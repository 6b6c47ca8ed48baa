-- The statements of worker.go, each named after the function that runs it.

-- name: WorkerSync
WITH gone AS (
    UPDATE workers SET state = 'unavailable', in_flight = 0
    WHERE state <> 'unavailable' AND NOT (id = ANY($1)) AND (SELECT dts_fence($8))
)
INSERT INTO workers (id, job_types, concurrency, state, in_flight, last_heartbeat_at, last_assigned_at)
SELECT id, string_to_array(types, E'\x1f'), conc, state, inflight, beat, assigned
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::int[], $6::timestamptz[], $7::timestamptz[])
    AS u(id, types, conc, state, inflight, beat, assigned)
WHERE (SELECT dts_fence($8))
ON CONFLICT (id) DO UPDATE SET job_types = excluded.job_types, concurrency = excluded.concurrency,
    state = excluded.state, in_flight = excluded.in_flight, last_heartbeat_at = excluded.last_heartbeat_at,
    last_assigned_at = coalesce(excluded.last_assigned_at, workers.last_assigned_at)

-- name: WorkerDelete
DELETE FROM workers WHERE id = $1 AND (SELECT dts_fence($2))

-- name: WorkerCleanup
DELETE FROM workers WHERE state = 'unavailable'
    AND coalesce(last_heartbeat_at, registered_at) < now() - $1 * interval '1 millisecond'
    AND (SELECT dts_fence($2))

-- name: WorkerList
SELECT id, job_types, concurrency, state, in_flight,
    coalesce(last_heartbeat_at, registered_at), last_assigned_at FROM workers ORDER BY id

-- name: WorkerGet
SELECT id, job_types, concurrency, state, in_flight,
    coalesce(last_heartbeat_at, registered_at), last_assigned_at FROM workers WHERE id = $1

-- name: WorkerJobTypes
-- Every job type some recorded worker names, in any state: a worker being
-- restarted still vouches for its names until retention deletes its row.
SELECT DISTINCT t.name FROM workers, unnest(job_types) AS t(name) ORDER BY 1
