-- The statements of dead.go, each named after the function that runs it.

-- name: DeadListPage
-- $4: the queue ('' for every queue), a filter on the rows read in
-- jobs_finished_idx order, as JobList's queue filter is.
SELECT {{jobColumns}}, coalesce(dead_reason, ''), coalesce(error_fingerprint, '') FROM jobs
    WHERE status = 'failed' AND ($1::timestamptz IS NULL OR (finished_at, id) < ($1, $2)) AND ($4 = '' OR queue = $4)
    ORDER BY finished_at DESC, id DESC LIMIT $3

-- name: DeadGroups
-- The dead jobs by name and error fingerprint, the $1 largest groups
-- (ties: the most recently failed first), each with its newest failure,
-- its newest job (the highest id) and that job's error as a sample; with
-- the number of groups and of dead jobs in all. The groups are read from
-- jobs_dead_groups_idx alone (an index-only scan, in group order, where the
-- visibility map allows); the samples are $1 primary-key look-ups.
WITH g AS (
    SELECT name, error_fingerprint AS fp, count(*) AS n, max(finished_at) AS last_at, max(id) AS newest
    FROM jobs WHERE status = 'failed'
    GROUP BY name, error_fingerprint
), top AS (
    SELECT g.*, count(*) OVER () AS groups, sum(g.n) OVER ()::bigint AS dead FROM g
    ORDER BY g.n DESC, g.last_at DESC NULLS LAST, g.name, g.fp LIMIT $1
)
SELECT top.name, top.fp, top.n, top.last_at, top.newest, coalesce(j.last_error, ''), top.groups, top.dead
FROM top LEFT JOIN jobs j ON j.id = top.newest
ORDER BY top.n DESC, top.last_at DESC NULLS LAST, top.name, top.fp
