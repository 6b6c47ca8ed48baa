-- The due jobs of each name in claim order, for the claim of a group of
-- workers that handles one name (dts_claim_group_jobs): jobs_due_idx is in
-- claim order across every name, so such a group's claim read the heap of
-- every other name's waiting jobs to skip them, some 50 rows per row
-- claimed in a fleet of 50 groups. The same predicate as jobs_due_idx, so
-- a job leaves it when it is leased.
CREATE INDEX jobs_name_due_idx ON jobs (name, priority DESC, next_run_at, id)
    WHERE status IN ('pending', 'retrying') AND limit_key IS NULL;
