package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// DeadJob is a job in the dead-letter queue.
type DeadJob struct {
	Job    *job.Job
	Reason string
	// Fingerprint is its error's (dts_error_fingerprint); "" for a job
	// made dead by hand, outside the store.
	Fingerprint string
}

// DeadList returns failed jobs, the most recently failed first.
func (s *Store) DeadList(ctx context.Context, limit int) ([]DeadJob, error) {
	dead, _, err := s.DeadListPage(ctx, DeadListParams{Limit: limit})
	return dead, err
}

// DeadCursor is where a page of the DLQ ends: the last entry's finished_at
// and id.
type DeadCursor struct {
	FinishedAt time.Time
	ID         int64
}

// DeadListParams selects a page of the DLQ.
type DeadListParams struct {
	After    *DeadCursor // nil: from the most recently failed
	Limit    int         // most entries; 0 or less: no limit
	MaxBytes int         // as in JobListParams
	Queue    string      // only this queue's dead jobs; "": every queue
}

// DeadListPage returns failed jobs, the most recently failed first (ties:
// the newest id first), and the cursor of the next page (nil at the end).
func (s *Store) DeadListPage(ctx context.Context, p DeadListParams) ([]DeadJob, *DeadCursor, error) {
	var limit *int // NULL: no limit
	if p.Limit > 0 {
		n := p.Limit + 1
		limit = &n
	}
	var afterAt *time.Time
	var afterID int64
	if p.After != nil {
		afterAt, afterID = &p.After.FinishedAt, p.After.ID
	}
	rows, err := s.pool.Query(ctx, q("DeadListPage"), afterAt, afterID, limit, p.Queue)
	if err != nil {
		return nil, nil, fmt.Errorf("list dead jobs: %w", interpretError(err))
	}
	out, more, err := collectPage(rows, p.Limit, p.MaxBytes, func(row pgx.Rows) (DeadJob, error) {
		var d DeadJob
		var err error
		d.Job, err = scanJob(scanTail{row, []any{&d.Reason, &d.Fingerprint}})
		return d, err
	}, func(d DeadJob) *job.Job { return d.Job })
	if err != nil {
		return nil, nil, fmt.Errorf("list dead jobs: %w", err)
	}
	if !more {
		return out, nil, nil
	}
	last := out[len(out)-1].Job
	var at time.Time
	if last.FinishedAt != nil {
		at = *last.FinishedAt
	}
	return out, &DeadCursor{FinishedAt: at, ID: last.ID}, nil
}

// scanTail appends extra destinations after the job columns.
type scanTail struct {
	row  pgx.Row
	tail []any
}

func (s scanTail) Scan(dest ...any) error { return s.row.Scan(append(dest, s.tail...)...) }

// DeadGroup is the dead jobs of one name whose errors have one
// fingerprint (dts_error_fingerprint).
type DeadGroup struct {
	Name string
	// Fingerprint is "" for dead jobs without one (made dead outside the
	// store): such a group cannot be selected by fingerprint.
	Fingerprint string
	Count       int64
	LastFailed  time.Time // the newest failure of the group
	NewestID    int64     // the group's newest job (highest id)
	Sample      string    // that job's error, as stored
}

// DeadGroups is the DLQ's largest groups and how many there are.
type DeadGroups struct {
	Groups []DeadGroup // the largest first (ties: the most recently failed)
	Total  int64       // groups in all
	Dead   int64       // dead jobs in all
}

// DeadGroups returns the limit largest groups of dead jobs by name and
// error fingerprint. It reads every dead job's index entry: callers share
// its answer for a while (the console caches it) rather than run it per
// viewer.
func (s *Store) DeadGroups(ctx context.Context, limit int) (DeadGroups, error) {
	rows, err := s.pool.Query(ctx, q("DeadGroups"), limit)
	if err != nil {
		return DeadGroups{}, fmt.Errorf("group dead jobs: %w", interpretError(err))
	}
	var out DeadGroups
	out.Groups, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadGroup, error) {
		var g DeadGroup
		var fp *string
		var last *time.Time
		err := r.Scan(&g.Name, &fp, &g.Count, &last, &g.NewestID, &g.Sample, &out.Total, &out.Dead)
		if fp != nil {
			g.Fingerprint = *fp
		}
		if last != nil {
			g.LastFailed = *last
		}
		return g, err
	})
	if err != nil {
		return DeadGroups{}, fmt.Errorf("group dead jobs: %w", interpretError(err))
	}
	return out, nil
}
