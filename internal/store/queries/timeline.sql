-- The statements of timeline.go, each named after the function that runs it.

-- name: JobTimelineGetJob
SELECT {{jobColumns}} FROM jobs WHERE id = $1

-- name: JobTimelineGetEvents
-- The job's latest $2 events (job_events_job_at_idx), newest first.
SELECT at, kind, detail FROM job_events WHERE job_id = $1 ORDER BY at DESC LIMIT $2

-- name: JobTimelineGetAudit
-- The latest $2 audit rows about the job (audit_log_job_idx): cancel,
-- requeue, run now. result is the outcome the action recorded, or
-- 'attempted' when it never did.
SELECT at, action, actor, coalesce(details->>'result', '') FROM audit_log
    WHERE target_type = 'job' AND target_id = $1 ORDER BY id DESC LIMIT $2
