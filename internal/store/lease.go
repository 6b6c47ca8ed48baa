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
	tag, err := s.pool.Exec(ctx, `
		UPDATE jobs j SET lease_expires_at = clock_timestamp() + $3 * interval '1 millisecond'
		FROM unnest($1::bigint[], $2::bigint[], $5::text[]) AS u(id, token, worker)
		WHERE j.id = u.id AND j.status = $4 AND j.lease_token = u.token AND j.worker_id = u.worker
		  AND j.lease_expires_at < clock_timestamp() + $3 * interval '0.5 millisecond'
		  AND (j.timeout_seconds = 0
		       OR j.started_at + j.timeout_seconds * interval '1 second' + $3 * interval '1 millisecond' > clock_timestamp())
		  AND (SELECT dts_fence($6))`,
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
	rows, err := s.pool.Query(ctx, `SELECT id, lease_token, coalesce(worker_id, '') FROM jobs WHERE status = 'leased'`)
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
