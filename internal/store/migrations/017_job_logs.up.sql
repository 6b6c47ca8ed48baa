-- Per-job logs (docs/api.md, "GET /jobs/{id}/logs"; docs/protocol.md,
-- "Logs"): the lines a handler logged during its attempts, as its worker
-- sent them with the attempt's progress reports and result. Written only
-- by the leader's result applier, once per batch that carries lines (a
-- batch without lines writes nothing here), and only for a result whose
-- lease the job still holds: a stale or superseded lease's lines are not
-- stored. Bounded per attempt (64 KiB) and per job (256 KiB, the oldest
-- lines, so an earlier attempt's, first); a line counts its message's
-- bytes plus 32. What is dropped is counted per attempt in job_log_drops.
--
-- Deleted with their job by the statement that deletes it (retention,
-- DELETE /jobs/{id}, bulk delete: the fragment deleteJobEvents), not by a
-- foreign key, for the reason job_events gives (migration 014).
--
-- seq orders a job's lines and lets a follower ask for the lines after
-- the last it saw; only the leader writes, one batch at a time, so a
-- line with a lower seq is never committed after one with a higher.
CREATE TABLE job_logs (
    job_id  bigint      NOT NULL,
    seq     bigint      GENERATED ALWAYS AS IDENTITY,
    attempt integer     NOT NULL,
    at      timestamptz NOT NULL,
    level   text        NOT NULL,
    message text        NOT NULL,
    PRIMARY KEY (job_id, seq)
);

CREATE TABLE job_log_drops (
    job_id  bigint  NOT NULL,
    attempt integer NOT NULL,
    dropped bigint  NOT NULL CHECK (dropped >= 0),
    PRIMARY KEY (job_id, attempt)
);
