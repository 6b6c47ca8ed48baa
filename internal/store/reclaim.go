package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// JobReclaimLeases fails the given leases of a worker that stopped
// heartbeating (reason worker_failure): exactly the (job, token, worker)
// triples the leader recorded for it, never "every lease of that worker", so
// a worker that came back under the same id keeps the leases it got since.
// Retries run at once, without backoff.
func (s *Store) JobReclaimLeases(ctx context.Context, epoch int64, ls []Release, policy RetryPolicy) ([]FailOutcome, error) {
	if len(ls) == 0 {
		return nil, nil
	}
	fs := make([]Failure, len(ls))
	for i, l := range ls {
		fs[i] = Failure{ID: l.ID, LeaseToken: l.LeaseToken, WorkerID: l.WorkerID, Reason: job.ReasonWorkerFailure,
			Error: "worker " + l.WorkerID + " stopped heartbeating", Immediate: true}
	}
	out, err := s.JobFailMany(ctx, epoch, fs, policy)
	if err != nil {
		return nil, fmt.Errorf("reclaim leases (%s): %w", job.ReasonWorkerFailure, err)
	}
	return out, nil
}

// JobReclaimExpired fails up to 1000 leases whose deadline has passed
// (reason lease_timeout), retrying with backoff. "Passed" is judged at the
// start of its transaction (now()), so a reclaim that had to wait for a
// lock does not take leases that heartbeats extended meanwhile. The leases
// of the workers in spare are left alone: workers alive whose heartbeats
// the leader has not yet applied since a stall of its own (a lock, Redis
// away), whose leases may have run out only because of it.
func (s *Store) JobReclaimExpired(ctx context.Context, epoch int64, spare []string, policy RetryPolicy) ([]FailOutcome, error) {
	if spare == nil {
		spare = []string{}
	}
	var out []FailOutcome
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, q("JobReclaimExpired"), epoch, spare)
		if err != nil {
			return err
		}
		fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Failure, error) {
			f := Failure{Reason: job.ReasonLeaseTimeout, Error: "lease expired"}
			return f, r.Scan(&f.ID, &f.LeaseToken, &f.WorkerID)
		})
		if err != nil || len(fs) == 0 {
			return err
		}
		out, err = failLeased(ctx, tx, epoch, fs, policy)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reclaim leases (%s): %w", job.ReasonLeaseTimeout, interpretError(err))
	}
	return out, nil
}
