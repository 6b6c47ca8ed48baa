package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// leased is passed as a parameter, not written as a literal, in the batch
// updates that join an unnest of ids: with the literal the planner may pick
// the partial index of leased jobs and scan the whole unnest once per leased
// job (quadratic in the batch's size); with a parameter the
// generic plan looks each id up by primary key. The pool forces generic plans
// (see Open) so the choice does not depend on fresh statistics.
const leased = string(job.StateLeased)

// LeaseExtendParams extends the leases of jobs their workers report running.
type LeaseExtendParams struct {
	Epoch   int64
	IDs     []int64
	Tokens  []int64
	Workers []string // the reporting worker of each
	// Waiting and RunMillis say, of each, whether its handler has not
	// started yet, or how many milliseconds ago it started (negative: the
	// worker did not say). Either may be nil: nobody said.
	Waiting   []bool
	RunMillis []int64
	Lease     time.Duration
}

// JobLeaseExtend pushes the deadline of each still-valid lease to now+Lease,
// touching only leases less than half their length from running out, and
// never a job already past its own timeout_seconds (plus one lease length of
// grace): such a job is left to expire. The time limit counts from the
// handler's start as its worker reports it (RunMillis), or from the lease's
// start if it did not; a job whose handler has not started (Waiting: a
// prefetched job waiting for a slot) is extended whatever its time limit.
// It returns how many leases moved. "Now" is clock_timestamp(), the moment
// the row is updated: an extension that waited for a lock still gives a
// whole lease from when it lands.
func (s *Store) JobLeaseExtend(ctx context.Context, p LeaseExtendParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	waiting, run := p.Waiting, p.RunMillis
	if waiting == nil {
		waiting = make([]bool, len(p.IDs))
	}
	if run == nil {
		run = make([]int64, len(p.IDs))
		for i := range run {
			run[i] = -1
		}
	}
	if len(waiting) != len(p.IDs) || len(run) != len(p.IDs) {
		return 0, fmt.Errorf("extend leases: %d ids, %d waiting, %d run times", len(p.IDs), len(waiting), len(run))
	}
	tag, err := s.pool.Exec(ctx, q("JobLeaseExtend"),
		p.IDs, p.Tokens, millis(p.Lease), leased, p.Workers, p.Epoch, waiting, run)
	if err != nil {
		return 0, fmt.Errorf("extend leases: %w", interpretError(err))
	}
	return tag.RowsAffected(), nil
}

// Lease is one current lease.
type Lease struct {
	ID         int64
	LeaseToken int64
	WorkerID   string
}

// JobLeasesList returns every current lease (a new leader's starting view of
// which worker holds what).
func (s *Store) JobLeasesList(ctx context.Context) ([]Lease, error) {
	rows, err := s.pool.Query(ctx, q("JobLeasesList"))
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Lease, error) {
		var l Lease
		return l, r.Scan(&l.ID, &l.LeaseToken, &l.WorkerID)
	})
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", interpretError(err))
	}
	return out, nil
}
