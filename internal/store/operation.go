package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// This file holds background bulk operations: an action (cancel, requeue,
// delete) on every job a filter selects, too many to change within one
// request. A submitter creates the operation row, then runs it a batch per
// transaction (OperationStep) while it holds the row's lease; every batch
// moves the row's cursor (after_id) and counts in the same transaction as
// its change, so the row always tells exactly what was done. Another
// submitter takes over an operation whose lease ran out
// (OperationClaimStale) and goes on from the cursor. A cancel is a
// guarded UPDATE of the row; a batch locks the row first, so it either
// committed before the cancel or sees it and changes nothing.

// Operation states.
const (
	OperationRunning  = "running"
	OperationDone     = "done"
	OperationCanceled = "canceled"
	OperationFailed   = "failed"
)

// ErrOperationLost says the caller no longer runs the operation: it was
// canceled, finished, or taken over after its lease ran out.
var ErrOperationLost = errors.New("operation no longer held")

// OperationFilter selects the jobs of an operation.
type OperationFilter struct {
	States []job.State // required: the states the action applies to
	Name   string      // "": any
	Queue  string      // "": any
	// Fingerprint keeps the dead jobs whose error has this fingerprint:
	// with Name (required with it), one dead-letter group. "": any.
	Fingerprint string
}

// check refuses a fingerprint without a name (see JobListParams).
func (f OperationFilter) check() error {
	if f.Fingerprint != "" && f.Name == "" {
		return errFingerprintNeedsName
	}
	return nil
}

func (f OperationFilter) states() []string {
	out := make([]string, len(f.States))
	for i, s := range f.States {
		out[i] = string(s)
	}
	return out
}

// Operation is one background bulk operation.
type Operation struct {
	ID        int64
	Action    string // cancel, requeue, delete
	Filter    OperationFilter
	State     string // OperationRunning, ...
	Matched   int64  // jobs the filter selected when it was created
	Processed int64  // jobs visited (locked) so far
	Affected  int64  // jobs the action changed so far
	AfterID   int64  // the cursor: every selected job up to it is done
	Actor     string
	AuditID   int64
	Error     string // why it failed
	// CanceledBy is who canceled it ("" unless canceled).
	CanceledBy string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt *time.Time
}

func scanOperation(row pgx.Row) (Operation, error) {
	var o Operation
	var states []string
	var auditID *int64
	var errText, canceledBy *string
	err := row.Scan(&o.ID, &o.Action, &states, &o.Filter.Name, &o.Filter.Queue, &o.Filter.Fingerprint, &o.State, &o.Matched, &o.Processed,
		&o.Affected, &o.AfterID, &o.Actor, &auditID, &errText, &canceledBy, &o.CreatedAt, &o.UpdatedAt, &o.FinishedAt)
	if err != nil {
		return o, err
	}
	for _, s := range states {
		o.Filter.States = append(o.Filter.States, job.State(s))
	}
	if auditID != nil {
		o.AuditID = *auditID
	}
	if errText != nil {
		o.Error = *errText
	}
	if canceledBy != nil {
		o.CanceledBy = *canceledBy
	}
	return o, nil
}

// skipRequested: a cancel leaves out jobs whose cancel was already
// requested (as JobBulkCancel does).
func skipRequested(action string) bool { return action == "cancel" }

// OperationCount counts the jobs f selects for action.
func (s *Store) OperationCount(ctx context.Context, action string, f OperationFilter) (int64, error) {
	if err := f.check(); err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	var n int64
	var err error
	if f.Fingerprint == "" {
		err = s.pool.QueryRow(ctx, q("OperationCount"), f.states(), f.Name, f.Queue, skipRequested(action)).Scan(&n)
	} else {
		err = s.pool.QueryRow(ctx, q("OperationCountDeadGroup"), f.states(), f.Name, f.Queue, skipRequested(action),
			f.Fingerprint).Scan(&n)
	}
	if err != nil {
		return 0, fmt.Errorf("count jobs: %w", interpretError(err))
	}
	return n, nil
}

// OperationCreateParams describes a new operation.
type OperationCreateParams struct {
	Action  string
	Filter  OperationFilter
	Matched int64
	Actor   string
	AuditID int64
	Owner   string        // the submitter that runs it
	Lease   time.Duration // how long the owner holds it without a batch
}

// OperationCreate records a new running operation held by p.Owner.
func (s *Store) OperationCreate(ctx context.Context, p OperationCreateParams) (Operation, error) {
	if err := p.Filter.check(); err != nil {
		return Operation{}, fmt.Errorf("create operation: %w", err)
	}
	o, err := scanOperation(s.pool.QueryRow(ctx, q("OperationCreate"), p.Action, p.Filter.states(), p.Filter.Name,
		p.Filter.Queue, p.Matched, p.Actor, p.AuditID, p.Owner, millis(p.Lease), p.Filter.Fingerprint))
	if err != nil {
		return o, fmt.Errorf("create operation: %w", interpretError(err))
	}
	return o, nil
}

// OperationGet returns one operation, or job.ErrNotFound.
func (s *Store) OperationGet(ctx context.Context, id int64) (Operation, error) {
	o, err := scanOperation(s.pool.QueryRow(ctx, q("OperationGet"), id))
	if err != nil {
		return o, fmt.Errorf("get operation %d: %w", id, interpretError(err))
	}
	return o, nil
}

// OperationList returns the newest operations, at most limit.
func (s *Store) OperationList(ctx context.Context, limit int) ([]Operation, error) {
	rows, err := s.pool.Query(ctx, q("OperationList"), limit)
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Operation, error) { return scanOperation(row) })
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", interpretError(err))
	}
	return out, nil
}

// OperationCancel cancels a running operation (by actor) and returns it:
// no batch starts after it, and the batches committed stay done. A
// finished operation is job.ErrConflict, an unknown one job.ErrNotFound.
func (s *Store) OperationCancel(ctx context.Context, id int64, actor string) (Operation, error) {
	o, err := scanOperation(s.pool.QueryRow(ctx, q("OperationCancel"), id, actor))
	if err == nil {
		return o, nil
	}
	if err = interpretError(err); !errors.Is(err, job.ErrNotFound) {
		return o, fmt.Errorf("cancel operation %d: %w", id, err)
	}
	if o, err = s.OperationGet(ctx, id); err != nil {
		return o, fmt.Errorf("cancel operation %d: %w", id, err)
	}
	return o, fmt.Errorf("cancel operation %d: it is %s: %w", id, o.State, job.ErrConflict)
}

// OperationStepResult is what one batch did.
type OperationStepResult struct {
	Op       Operation      // the row after the batch
	Affected int64          // jobs this batch changed
	Leased   []LeasedCancel // a cancel's running jobs, whose workers to tell
}

// OperationStep runs the next batch (at most batch jobs) of operation id
// held by owner, in one transaction: it locks the operation row, locks
// and changes the next jobs after the cursor, and moves the cursor and
// counts on, extending the lease. The operation is done when a batch
// comes back short. It returns ErrOperationLost when owner no longer runs
// it (canceled, finished, or taken over).
func (s *Store) OperationStep(ctx context.Context, id int64, owner string, lease time.Duration, batch int) (OperationStepResult, error) {
	var res OperationStepResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = OperationStepResult{}
		var action, name, queue, fingerprint, actor string
		var states []string
		var after int64
		err := tx.QueryRow(ctx, q("OperationStepLock"), id, owner).Scan(&action, &states, &name, &queue, &fingerprint, &after, &actor)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrOperationLost
		}
		if err != nil {
			return err
		}
		var rows pgx.Rows
		if fingerprint == "" {
			rows, err = tx.Query(ctx, q("OperationStepSelect"), after, states, name, queue, skipRequested(action), batch)
		} else {
			rows, err = tx.Query(ctx, q("OperationStepSelectDeadGroup"), after, states, name, queue, skipRequested(action),
				batch, fingerprint)
		}
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			after = ids[len(ids)-1]
			if res.Affected, res.Leased, err = operationApply(ctx, tx, action, actor, ids); err != nil {
				return err
			}
		}
		done := len(ids) < batch
		res.Op, err = scanOperation(tx.QueryRow(ctx, q("OperationStepProgress"), id, after, len(ids), res.Affected,
			millis(lease), done))
		return err
	})
	if errors.Is(err, ErrOperationLost) {
		return res, err
	}
	if err != nil {
		return res, fmt.Errorf("operation %d: batch: %w", id, interpretError(err))
	}
	return res, nil
}

// operationApply runs action on the locked jobs ids (those still in a
// state it applies to) and counts what it changed. A requeue records
// itself on each job's timeline with the operation's actor.
func operationApply(ctx context.Context, tx pgx.Tx, action, actor string, ids []int64) (int64, []LeasedCancel, error) {
	switch action {
	case "requeue":
		var n int64
		err := tx.QueryRow(ctx, q("OperationApplyRequeue"), ids, actor).Scan(&n)
		return n, nil, err
	case "delete":
		var n int64
		err := tx.QueryRow(ctx, q("OperationApplyDelete"), ids).Scan(&n)
		return n, nil, err
	case "cancel":
		rows, err := tx.Query(ctx, q("OperationApplyCancel"), ids)
		if err != nil {
			return 0, nil, err
		}
		var n int64
		var leased []LeasedCancel
		for rows.Next() {
			var c LeasedCancel
			var state string
			if err := rows.Scan(&c.JobID, &state, &c.WorkerID, &c.LeaseToken); err != nil {
				rows.Close()
				return 0, nil, err
			}
			n++
			if job.State(state) == job.StateLeased {
				leased = append(leased, c)
			}
		}
		return n, leased, rows.Err()
	}
	return 0, nil, fmt.Errorf("unknown action %q", action)
}

// OperationFail ends a running operation held by owner as failed, with
// the reason.
func (s *Store) OperationFail(ctx context.Context, id int64, owner, reason string) error {
	if _, err := s.pool.Exec(ctx, q("OperationFail"), id, owner, reason); err != nil {
		return fmt.Errorf("fail operation %d: %w", id, interpretError(err))
	}
	return nil
}

// OperationClaimStale takes over the oldest running operation whose lease
// ran out, for owner; ok is false when there is none.
func (s *Store) OperationClaimStale(ctx context.Context, owner string, lease time.Duration) (o Operation, ok bool, err error) {
	o, err = scanOperation(s.pool.QueryRow(ctx, q("OperationClaimStale"), owner, millis(lease)))
	if errors.Is(err, pgx.ErrNoRows) {
		return o, false, nil
	}
	if err != nil {
		return o, false, fmt.Errorf("claim stale operation: %w", interpretError(err))
	}
	return o, true, nil
}

// OperationRelease gives up owner's running operations, leaving them for
// whichever submitter claims them next (at shutdown).
func (s *Store) OperationRelease(ctx context.Context, owner string) error {
	if _, err := s.pool.Exec(ctx, q("OperationRelease"), owner); err != nil {
		return fmt.Errorf("release operations: %w", interpretError(err))
	}
	return nil
}
