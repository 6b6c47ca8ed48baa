-- The waiting jobs (a dependency not yet done), for the count of a cancel
-- of all matching jobs (OperationCount), which includes them as a cancel
-- of one job does: without it that count read the whole table. Partial:
-- only waiting jobs are in it, and a job enters and leaves the state once,
-- so it costs the jobs without dependencies nothing.
CREATE INDEX jobs_waiting_idx ON jobs (id) WHERE status = 'waiting';
