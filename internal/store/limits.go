package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// Limits (migration 013; docs/architecture.md, "Limits"). A job gets a
// limit_key when it is submitted: its concurrency key, or 'name:<name>'
// when the limits table has that row then. The limits table holds what an
// operator configured per key: a concurrency cap and a rate. The submitter
// writes it (audited, admin scope); the leader's limited claim
// (JobClaimLimited) reads it in each claim's own transaction. Nothing here
// is on the path of a job without a limit_key.

// Audit actions and target of the limit routes.
const (
	AuditLimitSet    = "limit.set"
	AuditLimitDelete = "limit.delete"
	AuditTargetLimit = "limit"
)

// NameLimitPrefix starts the key of a limit on a job name: "name:" + name.
const NameLimitPrefix = "name:"

// Limit is one row of limits.
type Limit struct {
	Key string
	// Concurrency is the most of the key's jobs leased at once across the
	// cluster; 0: no cap.
	Concurrency int
	// Rate is the most starts (leases) of the key's jobs within any
	// Period; 0: no rate limit.
	Rate   int
	Period time.Duration
	// Running is how many of the key's jobs are leased now; Waiting how
	// many are pending or retrying (LimitList only).
	Running, Waiting int64
	UpdatedAt        time.Time
}

// LimitSet creates or replaces the limit of a key and returns it.
func (s *Store) LimitSet(ctx context.Context, l Limit) (Limit, error) {
	var out Limit
	var period int32
	err := s.pool.QueryRow(ctx, q("LimitSet"), l.Key, l.Concurrency, l.Rate, int32(l.Period/time.Second)).
		Scan(&out.Key, &out.Concurrency, &out.Rate, &period, &out.UpdatedAt)
	if err != nil {
		return out, fmt.Errorf("set limit %q: %w", l.Key, interpretError(err))
	}
	out.Period = time.Duration(period) * time.Second
	return out, nil
}

// LimitDelete removes the limit of a key, and its recorded starts; the
// key's jobs are then claimed without a limit (they keep their
// limit_key). job.ErrNotFound when the key has no limit.
func (s *Store) LimitDelete(ctx context.Context, key string) error {
	var n int
	err := s.pool.QueryRow(ctx, q("LimitDelete"), key).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && n == 0) {
		return fmt.Errorf("delete limit %q: %w", key, job.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("delete limit %q: %w", key, interpretError(err))
	}
	return nil
}

// LimitList returns every configured limit by key, with its key's jobs
// running and waiting now.
func (s *Store) LimitList(ctx context.Context) ([]Limit, error) {
	rows, err := s.pool.Query(ctx, q("LimitList"))
	if err != nil {
		return nil, fmt.Errorf("list limits: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Limit, error) {
		var l Limit
		var period int32
		err := r.Scan(&l.Key, &l.Concurrency, &l.Rate, &period, &l.UpdatedAt, &l.Running, &l.Waiting)
		l.Period = time.Duration(period) * time.Second
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("list limits: %w", interpretError(err))
	}
	return out, nil
}

// JobLimitedWaiting reports whether any job with a limit_key is pending or
// retrying (one descent of jobs_limit_due_idx): the dispatcher runs the
// limited claim only then.
func (s *Store) JobLimitedWaiting(ctx context.Context) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, q("JobLimitedWaiting")).Scan(&ok); err != nil {
		return false, fmt.Errorf("look for limited jobs: %w", interpretError(err))
	}
	return ok, nil
}
