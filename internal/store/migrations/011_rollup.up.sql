-- The per-minute rollup behind the console's charts (docs/ui.md,
-- "Charts"): what happened to jobs in each minute, so the Overview draws
-- the last hour without Prometheus or Grafana, and without counting the
-- jobs table at request time.
--
-- The leader coordinator's maintenance service writes the rows of each
-- minute once, shortly after the minute ends (store.RollupWrite, fenced
-- by the leader's epoch), and deletes rows older than the retention
-- (store.RollupCleanup). name '' is the row of every job name together;
-- the other rows are the busiest names of that minute (at most
-- store.MaxRollupNames), so a flood of distinct names cannot grow the
-- table without bound.
--
-- completed, failed: jobs that reached that state in the minute (failed:
-- dead-lettered). started, start_p50_ms, start_p95_ms: jobs whose latest
-- attempt started in the minute, and the median and 95th percentile of
-- their submit-to-start time (NULL when none started). queue_depth,
-- oldest_pending_seconds: the due jobs and the oldest one's wait when the
-- row was written.
CREATE TABLE job_rollup (
    minute                 timestamptz      NOT NULL CHECK (date_trunc('minute', minute) = minute),
    name                   text             NOT NULL,
    completed              bigint           NOT NULL DEFAULT 0,
    failed                 bigint           NOT NULL DEFAULT 0,
    started                bigint           NOT NULL DEFAULT 0,
    start_p50_ms           double precision,
    start_p95_ms           double precision,
    queue_depth            bigint           NOT NULL DEFAULT 0,
    oldest_pending_seconds double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, name)
);
