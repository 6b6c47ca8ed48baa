package store

import (
	"context"
	"fmt"
	"time"

	"github.com/dtsched/dts/internal/job"
)

// This file holds the jobs waiting for a future run time (delayed,
// scheduled with run_at, or retrying after a backoff), as the console's
// Scheduled page lists them, and "run now".

// ScheduledCursor is where a page of JobListScheduled ends: the next page
// starts after (NextRunAt, ID).
type ScheduledCursor struct {
	NextRunAt time.Time
	ID        int64
}

// JobListScheduled returns up to limit pending or retrying jobs whose run
// time is still ahead, soonest first, after cursor (nil: from the
// soonest), and the cursor of the next page (nil on the last). It reads
// the due-jobs index's rows (pending and retrying), so its cost grows
// with that backlog, not with the whole table.
func (s *Store) JobListScheduled(ctx context.Context, limit int, after *ScheduledCursor) ([]*job.Job, *ScheduledCursor, error) {
	var at *time.Time
	var id int64
	if after != nil {
		at, id = &after.NextRunAt, after.ID
	}
	rows, err := s.pool.Query(ctx, q("JobListScheduled"), at, id, limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list scheduled jobs: %w", interpretError(err))
	}
	defer rows.Close()
	var out []*job.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, nil, fmt.Errorf("list scheduled jobs: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("list scheduled jobs: %w", interpretError(err))
	}
	if len(out) <= limit {
		return out, nil, nil
	}
	out = out[:limit]
	last := out[limit-1]
	return out, &ScheduledCursor{NextRunAt: last.NextRunAt, ID: last.ID}, nil
}

// JobRunNow makes a pending or retrying job whose run time is ahead due
// now. Any other job is job.ErrConflict (it runs already, or is due, or
// is over), an unknown one job.ErrNotFound.
func (s *Store) JobRunNow(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, q("JobRunNow"), id)
	if err != nil {
		return fmt.Errorf("run job %d now: %w", id, interpretError(err))
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	j, err := s.JobGet(ctx, id)
	if err != nil {
		return fmt.Errorf("run job %d now: %w", id, err)
	}
	return fmt.Errorf("run job %d now: it is %s and not waiting for a later time: %w", id, j.State, job.ErrConflict)
}
