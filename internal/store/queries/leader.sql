-- The statements of leader.go, each named after the function that runs it.

-- name: LeaderAcquireLease
UPDATE coordinator_lease SET holder = $1,
        expires_at = clock_timestamp() + $2 * interval '1 millisecond'
    WHERE id = 1 AND expires_at <= clock_timestamp()

-- name: LeaderAcquireEndStuckFence
SELECT dts_end_stuck_fence($1)

-- name: LeaderAcquireLockTimeout
SELECT set_config('lock_timeout', $1, true)

-- name: LeaderAcquireEpoch
-- The exclusive side of dts_fence's lock 727003: waits for the fenced
-- writes in progress, and holds new ones until this transaction commits.
WITH fence AS (SELECT pg_advisory_xact_lock(727003))
UPDATE coordinator_leader SET epoch = epoch + 1, leader_id = $1, acquired_at = now()
    FROM fence WHERE id = 1 RETURNING epoch

-- name: LeaderAcquireLeaseEpoch
UPDATE coordinator_lease SET epoch = $1 WHERE id = 1

-- name: LeaderRenew
UPDATE coordinator_lease SET expires_at = clock_timestamp() + $2 * interval '1 millisecond'
    WHERE id = 1 AND epoch = $1

-- name: LeaderResign
UPDATE coordinator_lease SET expires_at = clock_timestamp()
    WHERE id = 1 AND epoch = $1

-- name: LeaderGet
SELECT epoch, leader_id FROM coordinator_leader WHERE id = 1
