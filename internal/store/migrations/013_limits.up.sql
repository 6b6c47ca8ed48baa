-- Limits (docs/architecture.md, "Limits"; docs/api.md, "Limits").
--
-- A job submitted with a concurrency_key, or whose name had a limit
-- configured (a row 'name:<name>' below) when it was submitted, gets a
-- limit_key; every other job has NULL there and is claimed exactly as
-- before: jobs_due_idx is rebuilt to hold only jobs without a limit_key,
-- so the plain claim (dts_claim_jobs) never sees a limited job, and an
-- unlimited job's insert writes no more index entries than before (the two
-- new indexes are partial on limit_key IS NOT NULL).

-- One row per configured key: 'name:<job name>' or a free-form
-- concurrency key. concurrency: at most that many of the key's jobs leased
-- at once across the cluster (0: no cap). rate, period_seconds: at most
-- rate starts (leases) of the key's jobs in any period_seconds (0, 0: no
-- rate limit).
CREATE TABLE limits (
    key            text        PRIMARY KEY CHECK (char_length(key) BETWEEN 1 AND 200),
    concurrency    integer     NOT NULL DEFAULT 0 CHECK (concurrency >= 0),
    rate           integer     NOT NULL DEFAULT 0 CHECK (rate >= 0),
    period_seconds integer     NOT NULL DEFAULT 0 CHECK (period_seconds >= 0),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((rate = 0) = (period_seconds = 0))
);

-- The starts of rate-limited keys within their period: one row per lease,
-- written by the limited claim in its own transaction (so the count it
-- reads next time includes them), and deleted by it once older than the
-- key's period. Only keys with a rate have rows here.
CREATE TABLE limit_starts (
    key text        NOT NULL,
    at  timestamptz NOT NULL
);
CREATE INDEX limit_starts_key_at_idx ON limit_starts (key, at);

ALTER TABLE jobs ADD COLUMN limit_key text CHECK (char_length(limit_key) BETWEEN 1 AND 200);

-- The plain claim's index, now without limited jobs. dts_claim_jobs's
-- WHERE says limit_key IS NULL too, so the planner uses it.
DROP INDEX jobs_due_idx;
CREATE INDEX jobs_due_idx ON jobs (priority DESC, next_run_at, id)
    WHERE status IN ('pending', 'retrying') AND limit_key IS NULL;

-- The limited claim's index: each key's waiting jobs in claim order (a
-- loose scan of its first column finds the keys with waiting jobs).
CREATE INDEX jobs_limit_due_idx ON jobs (limit_key, priority DESC, next_run_at, id)
    WHERE status IN ('pending', 'retrying') AND limit_key IS NOT NULL;

-- Each key's running jobs, counted by the limited claim.
CREATE INDEX jobs_limit_leased_idx ON jobs (limit_key)
    WHERE status = 'leased' AND limit_key IS NOT NULL;
