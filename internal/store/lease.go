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
// job (quadratic; seen at 110 ms per 1000-row batch); with a parameter the
// generic plan looks each id up by primary key. The pool forces generic plans
// (see Open) so the choice does not depend on fresh statistics.
const leased = string(job.StateLeased)

// LeaseExtendParams extends the leases of jobs their workers report running.
type LeaseExtendParams struct {
	Epoch   int64
	IDs     []int64
	Tokens  []int64
	Workers []string // the reporting worker of each
	Lease   time.Duration
}

// JobLeaseExtend pushes the deadline of each still-valid lease to now+Lease,
// touching only leases less than half their length from running out, and
// never a job already past its own timeout_seconds (plus one lease length of
// grace): such a job is left to expire. It returns how many leases moved.
// "Now" is clock_timestamp(), the moment the row is updated: an extension
// that waited for a lock still gives a whole lease from when it lands.
func (s *Store) JobLeaseExtend(ctx context.Context, p LeaseExtendParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, q("JobLeaseExtend"),
		p.IDs, p.Tokens, millis(p.Lease), leased, p.Workers, p.Epoch)
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
