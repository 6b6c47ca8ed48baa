-- The statements of submitter_jobs.go, each named after the function that runs it.

-- name: JobStateGetMany
SELECT id, status FROM jobs WHERE id = ANY($1)
