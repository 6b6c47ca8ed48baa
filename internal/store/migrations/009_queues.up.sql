-- Queues that schedule (docs/architecture.md, "Queues"). A job names its
-- queue (jobs.queue, since 001); a row here is only needed for a queue an
-- operator paused or capped. A queue without a row, or with paused = false
-- and concurrency = 0, is dispatched exactly as before this migration.
CREATE TABLE queues (
    name        text        PRIMARY KEY CHECK (char_length(name) BETWEEN 1 AND 64),
    paused      boolean     NOT NULL DEFAULT false,
    -- At most this many of the queue's jobs leased at once across the
    -- cluster; 0: no cap.
    concurrency integer     NOT NULL DEFAULT 0 CHECK (concurrency >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The claim of one queue (dts_claim_queue_jobs) reads its due jobs in
-- priority order from here; jobs_due_idx would make it walk every other
-- queue's jobs ahead of them (a paused queue's backlog, say). Like
-- jobs_due_idx it holds only waiting jobs, so a claim's UPDATE to 'leased'
-- adds no entry to it.
CREATE INDEX jobs_queue_due_idx ON jobs (queue, priority DESC, next_run_at, id) WHERE status IN ('pending', 'retrying');
