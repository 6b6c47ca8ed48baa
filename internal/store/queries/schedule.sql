-- The statements of schedule.go, each named after the function that runs it.

-- name: scheduleColumns
-- The columns scanSchedule reads, in its order.
id, name, cron, time_zone, overlap, catch_up, paused, job_name, job_queue, job_priority, job_payload,
    job_max_retries, job_timeout_seconds, next_fire_at, last_fire_at, coalesce(last_job_id, 0), created_at, updated_at

-- name: ScheduleInsertNow
SELECT now()

-- name: ScheduleInsert
INSERT INTO schedules (name, cron, time_zone, overlap, catch_up, job_name, job_queue, job_priority, job_payload,
                       job_max_retries, job_timeout_seconds, next_fire_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11, $12)
RETURNING {{scheduleColumns}}

-- name: ScheduleGet
SELECT {{scheduleColumns}} FROM schedules WHERE id = $1

-- name: ScheduleList
SELECT {{scheduleColumns}} FROM schedules WHERE id < $1 ORDER BY id DESC LIMIT $2

-- name: SchedulePause
UPDATE schedules SET paused = true, updated_at = now() WHERE id = $1 RETURNING {{scheduleColumns}}

-- name: ScheduleResumeLock
SELECT paused, now() FROM schedules WHERE id = $1 FOR UPDATE

-- name: ScheduleResume
-- The ticks of the pause are not caught up: the next one is after now
-- ($2, NULL when the schedule is active and keeps its next tick).
UPDATE schedules SET paused = false, next_fire_at = coalesce($2, next_fire_at), updated_at = now() WHERE id = $1
RETURNING {{scheduleColumns}}

-- name: ScheduleDelete
DELETE FROM schedules WHERE id = $1 RETURNING {{scheduleColumns}}

-- name: ScheduleTrigger
-- Not a tick: schedule_tick stays NULL, which the unique index allows any
-- number of times, and the schedule's next and last ticks do not move.
-- A limit on the job's name applies as to a submission (limit_key).
INSERT INTO jobs (name, queue, priority, payload, max_retries, timeout_seconds, schedule_id, limit_key)
SELECT job_name, job_queue, job_priority, job_payload, job_max_retries, job_timeout_seconds, id,
        (SELECT l.key FROM limits l WHERE l.key = 'name:' || job_name)
    FROM schedules WHERE id = $1
RETURNING id

-- name: ScheduleListNext
-- The active schedules whose next tick is nearest, and PostgreSQL's time.
SELECT id, cron, time_zone, overlap, catch_up, next_fire_at, now() FROM schedules
    WHERE NOT paused ORDER BY next_fire_at LIMIT $1

-- name: ScheduleFireLock
-- Locks the schedule if it still waits for the tick the leader looked at,
-- and says whether the job of its last tick is unfinished (deleted by
-- retention means finished).
SELECT s.overlap, coalesce(j.status IN ('pending', 'leased', 'retrying'), false)
    FROM schedules s LEFT JOIN jobs j ON j.id = s.last_job_id
    WHERE s.id = $1 AND s.next_fire_at = $2 AND NOT s.paused AND (SELECT dts_fence($3))
    FOR UPDATE OF s

-- name: ScheduleFireInsert
INSERT INTO jobs (name, queue, priority, payload, max_retries, timeout_seconds, schedule_id, schedule_tick,
                  limit_key)
SELECT s.job_name, s.job_queue, s.job_priority, s.job_payload, s.job_max_retries, s.job_timeout_seconds, s.id, t.tick,
        (SELECT l.key FROM limits l WHERE l.key = 'name:' || s.job_name)
    FROM schedules s, unnest($2::timestamptz[]) WITH ORDINALITY AS t(tick, ord)
    WHERE s.id = $1 AND (SELECT dts_fence($3))
    ORDER BY t.ord
ON CONFLICT (schedule_id, schedule_tick) WHERE schedule_id IS NOT NULL DO NOTHING
RETURNING id, schedule_tick

-- name: ScheduleFireAdvance
UPDATE schedules SET next_fire_at = $2, last_fire_at = coalesce($3, last_fire_at),
    last_job_id = coalesce($4, last_job_id), updated_at = now()
    WHERE id = $1 AND (SELECT dts_fence($5))
