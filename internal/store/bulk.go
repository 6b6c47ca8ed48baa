package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// This file holds the actions an operator takes on many jobs at once
// (POST /jobs/bulk) and the deletion of one job. A bulk action never holds
// more than one batch of rows locked: it walks the selected jobs by id, a
// batch per transaction, so that a purge of a million failed jobs neither
// blocks the coordinator's claims for long nor grows one transaction
// without bound. Each row is visited once; a job whose state changed since
// it was selected is re-checked by the action's WHERE and skipped.

// DefaultBulkBatch is the most rows one transaction of a bulk action changes.
const DefaultBulkBatch = 1000

// JobBulkParams selects the jobs of a bulk action.
type JobBulkParams struct {
	// States are the states the action applies to (narrowed by the
	// caller's status filter). Required.
	States []job.State
	// Name keeps jobs of one type; empty: any.
	Name string
	// Batch is the most rows per transaction; 0 or less: DefaultBulkBatch.
	Batch int
	// Actor is who acts (httpx principal's Actor), kept on the timeline of
	// each job a requeue changes.
	Actor string
}

func (p JobBulkParams) states() []string {
	out := make([]string, len(p.States))
	for i, s := range p.States {
		out[i] = string(s)
	}
	return out
}

func (p JobBulkParams) batch() int {
	if p.Batch <= 0 {
		return DefaultBulkBatch
	}
	return p.Batch
}

// JobBulkCount counts the jobs p selects; skipRequested leaves out jobs
// whose cancel was already requested (what JobBulkCancel would skip).
func (s *Store) JobBulkCount(ctx context.Context, p JobBulkParams, skipRequested bool) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, q("JobBulkCount"), p.states(), p.Name, skipRequested).Scan(&n); err != nil {
		return 0, fmt.Errorf("count jobs: %w", interpretError(err))
	}
	return n, nil
}

// jobBulkSelect locks the next batch of p's jobs after id after, in tx.
func jobBulkSelect(ctx context.Context, tx pgx.Tx, p JobBulkParams, after int64, skipRequested bool) ([]int64, error) {
	rows, err := tx.Query(ctx, q("JobBulkSelect"), after, p.states(), p.Name, skipRequested, p.batch())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// jobBulk runs apply on each batch of p's jobs, one transaction per batch,
// and returns the sum of what apply counted.
func (s *Store) jobBulk(ctx context.Context, p JobBulkParams, skipRequested bool, apply func(tx pgx.Tx, ids []int64) (int64, error)) (int64, error) {
	var after, total int64
	for {
		var ids []int64
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			if ids, err = jobBulkSelect(ctx, tx, p, after, skipRequested); err != nil || len(ids) == 0 {
				return err
			}
			n, err := apply(tx, ids)
			total += n
			return err
		})
		if err != nil {
			return total, interpretError(err)
		}
		if len(ids) < p.batch() {
			return total, nil
		}
		after = ids[len(ids)-1]
	}
}

// LeasedCancel is a running job whose cancel JobBulkCancel recorded: the
// worker to tell.
type LeasedCancel struct {
	JobID      int64
	WorkerID   string
	LeaseToken int64
}

// JobBulkCancel cancels p's jobs as JobCancel does each: waiting, pending
// and retrying ones at once (a waiting job's dependents with it, by the
// dependency trigger), leased ones by recording the request (returned,
// so that their workers can be told). It returns how many it changed.
func (s *Store) JobBulkCancel(ctx context.Context, p JobBulkParams) (int64, []LeasedCancel, error) {
	var leased []LeasedCancel
	n, err := s.jobBulk(ctx, p, true, func(tx pgx.Tx, ids []int64) (int64, error) {
		rows, err := tx.Query(ctx, q("JobBulkCancel"), ids)
		if err != nil {
			return 0, err
		}
		var n int64
		for rows.Next() {
			var c LeasedCancel
			var state string
			if err := rows.Scan(&c.JobID, &state, &c.WorkerID, &c.LeaseToken); err != nil {
				rows.Close()
				return 0, err
			}
			n++
			if job.State(state) == job.StateLeased {
				leased = append(leased, c)
			}
		}
		return n, rows.Err()
	})
	if err != nil {
		return n, nil, fmt.Errorf("bulk cancel: %w", err)
	}
	return n, leased, nil
}

// JobBulkRequeue makes p's failed jobs pending again, as JobRequeueDead
// does each, and returns how many. Each one's timeline gets the requeue
// (an operator event job.requeue by p.Actor), which a single requeue gets
// from its audit row.
func (s *Store) JobBulkRequeue(ctx context.Context, p JobBulkParams) (int64, error) {
	n, err := s.jobBulk(ctx, p, false, func(tx pgx.Tx, ids []int64) (int64, error) {
		var n int64
		err := tx.QueryRow(ctx, q("JobBulkRequeue"), ids, p.Actor).Scan(&n)
		return n, err
	})
	if err != nil {
		return n, fmt.Errorf("bulk requeue: %w", err)
	}
	return n, nil
}

// JobBulkDelete deletes p's jobs that are completed, failed or canceled,
// and returns how many.
func (s *Store) JobBulkDelete(ctx context.Context, p JobBulkParams) (int64, error) {
	n, err := s.jobBulk(ctx, p, false, func(tx pgx.Tx, ids []int64) (int64, error) {
		var n int64
		err := tx.QueryRow(ctx, q("JobBulkDelete"), ids).Scan(&n)
		return n, err
	})
	if err != nil {
		return n, fmt.Errorf("bulk delete: %w", err)
	}
	return n, nil
}

// JobDelete deletes a job that is completed, failed or canceled and
// returns the state it had. A live job gives job.ErrConflict, an unknown
// id job.ErrNotFound.
func (s *Store) JobDelete(ctx context.Context, id int64) (job.State, error) {
	var state string
	err := s.pool.QueryRow(ctx, q("JobDelete"), id).Scan(&state)
	if err == nil {
		return job.State(state), nil
	}
	if err = interpretError(err); err != job.ErrNotFound {
		return "", fmt.Errorf("delete job %d: %w", id, err)
	}
	j, err := s.JobGet(ctx, id)
	if err != nil {
		return "", fmt.Errorf("delete job %d: %w", id, err)
	}
	return "", fmt.Errorf("delete job %d: it is %s, not finished: %w", id, j.State, job.ErrConflict)
}
