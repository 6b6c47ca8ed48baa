-- Periodic jobs: a schedule enqueues a job made from its template at each
-- tick of its cron expression (computed in its time zone by the leader
-- coordinator, package internal/schedule). next_fire_at is the next tick
-- the leader will look at; the leader advances it in the same fenced
-- transaction that enqueues the tick's job, guarded by its old value, so a
-- tick is looked at once.
CREATE TABLE schedules (
    id                  bigserial PRIMARY KEY,
    name                text        NOT NULL UNIQUE CHECK (name <> '' AND length(name) <= 128),
    cron                text        NOT NULL,
    time_zone           text        NOT NULL,
    overlap             text        NOT NULL CHECK (overlap IN ('skip', 'allow')),
    catch_up            text        NOT NULL CHECK (catch_up IN ('none', 'one')),
    paused              boolean     NOT NULL DEFAULT false,
    -- The job template, checked as a submission is.
    job_name            text        NOT NULL CHECK (job_name <> '' AND length(job_name) <= 128),
    job_queue           text        NOT NULL DEFAULT 'default',
    job_priority        integer     NOT NULL DEFAULT 0,
    job_payload         jsonb       NOT NULL DEFAULT 'null',
    job_max_retries     integer     NOT NULL DEFAULT 3 CHECK (job_max_retries >= 0),
    job_timeout_seconds integer     NOT NULL DEFAULT 0 CHECK (job_timeout_seconds >= 0),
    next_fire_at        timestamptz NOT NULL,
    last_fire_at        timestamptz,
    -- The job of the last tick enqueued: the skip overlap policy waits
    -- for it to be final.
    last_job_id         bigint,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
-- The scheduler's look: active schedules by next tick.
CREATE INDEX schedules_next_idx ON schedules (next_fire_at) WHERE NOT paused;

-- A job enqueued by a schedule names it and, for a tick (not for a
-- trigger), the tick's time. The unique index makes a tick one job
-- whatever runs the INSERT twice (ON CONFLICT DO NOTHING). Adding nullable
-- columns without a default rewrites nothing; the index build reads the
-- table once.
ALTER TABLE jobs ADD COLUMN schedule_id bigint REFERENCES schedules (id) ON DELETE SET NULL,
                 ADD COLUMN schedule_tick timestamptz;
CREATE UNIQUE INDEX jobs_schedule_tick_idx ON jobs (schedule_id, schedule_tick) WHERE schedule_id IS NOT NULL;
