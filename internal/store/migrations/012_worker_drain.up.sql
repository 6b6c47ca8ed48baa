-- Worker drain and the console's Workers page; background bulk operations
-- (docs/architecture.md, "Worker drain" and "Bulk operations").
--
-- drain_requested_at/by: an operator asked (POST /workers/{id}/drain) that
-- the worker get no new jobs. The submitter sets it; the leader reads the
-- flags at every worker sync and stops leasing to the worker, whose row
-- then shows state 'draining'. The flag lives until the row is deleted
-- (the worker stopped cleanly, or retention forgot it).
-- host, version: what the worker's heartbeats say about itself.
ALTER TABLE workers
    ADD COLUMN host               text NOT NULL DEFAULT '',
    ADD COLUMN version            text NOT NULL DEFAULT '',
    ADD COLUMN drain_requested_at timestamptz,
    ADD COLUMN drain_requested_by text;

-- A bulk action on every job a filter selects, run in the background by a
-- submitter one batch per transaction (POST /jobs/bulk with background,
-- the console's "all N matching"). after_id is the cursor: the batches
-- walk the selected jobs by id, so a run taken over by another submitter
-- (its owner's lease_until passed) goes on where the last committed batch
-- ended. Every batch locks this row first, so a cancel (state 'canceled')
-- and a batch never interleave.
CREATE TABLE operations (
    id          bigserial   PRIMARY KEY,
    action      text        NOT NULL CHECK (action IN ('cancel', 'requeue', 'delete')),
    states      text[]      NOT NULL,
    name        text        NOT NULL DEFAULT '',
    queue       text        NOT NULL DEFAULT '',
    state       text        NOT NULL DEFAULT 'running'
                CHECK (state IN ('running', 'done', 'canceled', 'failed')),
    matched     bigint      NOT NULL DEFAULT 0,
    processed   bigint      NOT NULL DEFAULT 0,
    affected    bigint      NOT NULL DEFAULT 0,
    after_id    bigint      NOT NULL DEFAULT 0,
    actor       text        NOT NULL,
    audit_id    bigint,
    error       text,
    canceled_by text,
    owner       text        NOT NULL,
    lease_until timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX operations_running_idx ON operations (lease_until) WHERE state = 'running';
