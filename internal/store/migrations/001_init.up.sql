-- Jobs: the source of truth for every job the submitter accepted.
CREATE SEQUENCE lease_token_seq;

CREATE TABLE jobs (
    id               bigserial PRIMARY KEY,
    name             text        NOT NULL CHECK (name <> '' AND length(name) <= 128),
    queue            text        NOT NULL DEFAULT 'default',
    priority         integer     NOT NULL DEFAULT 0,
    payload          jsonb       NOT NULL DEFAULT 'null',
    status           text        NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'leased', 'retrying', 'completed', 'failed', 'canceled')),
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_retries      integer     NOT NULL DEFAULT 3 CHECK (max_retries >= 0),
    timeout_seconds  integer     NOT NULL DEFAULT 0 CHECK (timeout_seconds >= 0),
    idempotency_key  text,
    last_error       text,
    errors           jsonb       NOT NULL DEFAULT '[]',
    result           jsonb,
    worker_id        text,
    lease_token      bigint,
    lease_expires_at timestamptz,
    cancel_requested boolean     NOT NULL DEFAULT false,
    dead_reason      text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    next_run_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((status = 'leased') = (lease_token IS NOT NULL))
);

-- Indexes are few on purpose: every state change of a job is an UPDATE that
-- cannot be HOT (status is indexed), so each index costs an insertion per
-- transition. Partial indexes only receive the rows in their state.
-- Claim: due jobs in priority order.
CREATE INDEX jobs_due_idx ON jobs (priority DESC, next_run_at, id) WHERE status IN ('pending', 'retrying');
-- Leases: by worker (reclaim when it dies); the expiry scan reads the whole
-- leased set, which is bounded by the fleet's slots.
CREATE INDEX jobs_leased_idx ON jobs (worker_id) WHERE status = 'leased';
-- Retention, the DLQ listing and status listings of finished jobs.
CREATE INDEX jobs_finished_idx ON jobs (status, finished_at) WHERE status IN ('completed', 'failed', 'canceled');
-- Idempotency keys are unique among the jobs that have one.
CREATE UNIQUE INDEX jobs_idempotency_key_idx ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Workers: the fleet as the leader coordinator last saw it (for /stats and operators).
CREATE TABLE workers (
    id               text PRIMARY KEY,
    job_types        text[]      NOT NULL DEFAULT '{}',
    concurrency      integer     NOT NULL DEFAULT 1,
    state            text        NOT NULL DEFAULT 'available'
                     CHECK (state IN ('available', 'busy', 'unavailable', 'draining')),
    in_flight        integer     NOT NULL DEFAULT 0,
    last_heartbeat_at timestamptz,
    last_assigned_at timestamptz,
    registered_at    timestamptz NOT NULL DEFAULT now()
);

-- Leader election: one row; epoch grows by one at every change of leader.
CREATE TABLE coordinator_leader (
    id          integer PRIMARY KEY CHECK (id = 1),
    epoch       bigint      NOT NULL DEFAULT 0,
    leader_id   text,
    acquired_at timestamptz
);
INSERT INTO coordinator_leader (id) VALUES (1);
