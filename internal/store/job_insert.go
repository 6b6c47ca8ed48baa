package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// JobInsertParams describes one job to create.
type JobInsertParams struct {
	Name           string
	Queue          string
	Priority       int
	Payload        json.RawMessage
	MaxRetries     int
	TimeoutSeconds int
	IdempotencyKey string     // empty: none
	RunAt          *time.Time // nil: now + Delay, by PostgreSQL's clock
	Delay          time.Duration
	// DependsOn names existing jobs that must complete before this one
	// runs; an unknown id fails the whole insert (*UnknownJobsError).
	DependsOn []int64
	// DependsOnIndex names earlier jobs of the same JobInsert call (their
	// indices, each below this job's own) that must complete first.
	DependsOnIndex []int
	// Callback makes this job a batch callback: its parents are every
	// earlier job of the call, and it runs once all of them are final,
	// whatever their outcome, with their outcomes in its payload.
	Callback bool
	// Unique, if not nil, makes the job unique (unique.go): while an
	// earlier job holds its key, that job is answered instead.
	Unique *Unique
	// ConcurrencyKey, if not empty, is the job's limit_key: the limit
	// configured for that key (limits.go) applies to it, now or once
	// one is set. Empty: the job's limit_key is "name:<Name>" if that
	// limit exists when it is inserted, else none.
	ConcurrencyKey string
	// TraceParent is the W3C trace context the job continues
	// (trace_parent); empty: none.
	TraceParent string
}

// hasParents reports whether the job waits on others.
func (p *JobInsertParams) hasParents() bool {
	return len(p.DependsOn) > 0 || len(p.DependsOnIndex) > 0 || p.Callback
}

// JobInsertResult is the outcome for one JobInsertParams, in input order.
type JobInsertResult struct {
	ID      int64
	Created bool // false: an earlier job had the same idempotency key, or held the same unique key
	// State is the job's state after the insert: pending, or for a job
	// with parents waiting, pending (its parents are done) or canceled (one
	// failed or was canceled). For an earlier job (Created false) it is
	// empty: JobStateGetMany reads it.
	State job.State
	// Limited says the job was created with a limit_key (its concurrency
	// key, or a limit on its name): only the limited claim takes it, so
	// the submitter's wake-up says so (queue.Wake).
	Limited bool
}

// UnknownJobsError says that jobs named as parents do not exist (never
// did, or retention deleted them). It wraps job.ErrNotFound.
type UnknownJobsError struct {
	IDs []int64 // ascending
}

func (e *UnknownJobsError) Error() string {
	return fmt.Sprintf("unknown parent jobs %v", e.IDs)
}

func (e *UnknownJobsError) Unwrap() error { return job.ErrNotFound }

// JobInsert creates jobs in one statement, all or nothing. A job whose
// idempotency key already exists is not created; its result carries the
// earlier job's id and Created false.
//
// When any job has a key, the INSERT and the look-up of the keys it did
// not create run in one transaction, so an error at any point means the
// whole insert was rolled back: a job.ErrRefused from here always means
// nothing was written, and the caller may insert the rows again (the
// insertBatcher does). A key whose job is deleted (by retention) between
// the INSERT and the look-up is free again: its job is inserted again in
// the same transaction.
//
// Jobs with parents (DependsOn, DependsOnIndex, Callback) are inserted in
// one transaction with their edges (jobInsertDeps); unique jobs (Unique)
// in one transaction with their claims (unique.go). A call with neither
// runs as before: no statement is added for it.
func (s *Store) JobInsert(ctx context.Context, params []JobInsertParams) ([]JobInsertResult, error) {
	all := make([]int, len(params))
	keyed, deps, unique := false, false, false
	for i, p := range params {
		all[i] = i
		keyed = keyed || p.IdempotencyKey != ""
		deps = deps || p.hasParents()
		unique = unique || p.Unique != nil
	}
	out := make([]JobInsertResult, len(params))
	if deps || unique {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			return jobInsertTx(ctx, tx, params, all, deps, unique, out)
		})
		if err != nil {
			return nil, fmt.Errorf("insert jobs: %w", interpretError(err))
		}
		return out, nil
	}
	if !keyed { // nothing to look up: one statement, committed by itself
		if _, err := jobInsertRows(ctx, s.pool, params, all, out); err != nil {
			return nil, fmt.Errorf("insert jobs: %w", interpretError(err))
		}
		return out, nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return jobInsertKeyed(ctx, tx, params, all, out)
	})
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", interpretError(err))
	}
	return out, nil
}

// jobInsertTx inserts jobs with parents or unique keys in tx: the claims
// first (the jobs a live claim answers are not inserted), then the jobs
// and their edges, then the claims of the jobs created.
func jobInsertTx(ctx context.Context, tx pgx.Tx, params []JobInsertParams, idx []int, deps, unique bool, out []JobInsertResult) error {
	u := &uniqueBatch{}
	if unique {
		var err error
		if u, idx, err = jobUniqueClaim(ctx, tx, params, out); err != nil {
			return err
		}
	}
	if deps {
		// After each insert: the repeats of a key to insert in their
		// first job's place (uniqueBatch.promote), or, once there are
		// none, every repeat answered.
		resolve := func(out []JobInsertResult) []int {
			if next := u.promote(params, out); len(next) > 0 {
				return next
			}
			u.fillRepeats(out)
			return nil
		}
		if err := jobInsertDeps(ctx, tx, params, idx, out, resolve); err != nil {
			return err
		}
	} else {
		for len(idx) > 0 {
			if err := jobInsertKeyed(ctx, tx, params, idx, out); err != nil {
				return err
			}
			idx = u.promote(params, out)
		}
		u.fillRepeats(out)
	}
	if unique {
		return jobUniqueSet(ctx, tx, params, u, out)
	}
	return nil
}

// jobInsertLookups bounds how often a key whose job vanished between the
// INSERT and the look-up is inserted again before JobInsert gives up.
const jobInsertLookups = 3

// jobInsertKeyed inserts params[idx] in tx and fills out for each: the
// new job, or the earlier one holding its key.
func jobInsertKeyed(ctx context.Context, tx pgx.Tx, params []JobInsertParams, idx []int, out []JobInsertResult) error {
	for round := 1; ; round++ {
		missing, err := jobInsertRows(ctx, tx, params, idx, out)
		if err != nil {
			return err
		}
		if len(missing) == 0 {
			return nil
		}
		keys := make([]string, len(missing))
		for i, m := range missing {
			keys[i] = params[m].IdempotencyKey
		}
		// A new statement of the transaction: it sees the jobs that
		// other transactions committed while the INSERT waited on them.
		rows, err := tx.Query(ctx, q("JobInsertKeyedLookup"), keys)
		if err != nil {
			return fmt.Errorf("look up idempotency keys: %w", err)
		}
		byKey := map[string]int64{}
		for rows.Next() {
			var id int64
			var key string
			if err := rows.Scan(&id, &key); err != nil {
				rows.Close()
				return fmt.Errorf("look up idempotency keys: %w", err)
			}
			byKey[key] = id
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("look up idempotency keys: %w", err)
		}
		idx = idx[:0:0]
		for _, m := range missing {
			if id, ok := byKey[params[m].IdempotencyKey]; ok {
				out[m] = JobInsertResult{ID: id}
			} else {
				idx = append(idx, m)
			}
		}
		if len(idx) == 0 {
			return nil
		}
		if round == jobInsertLookups {
			// Rolled back: the caller may try again, this row alone.
			return fmt.Errorf("idempotency key %q: its job keeps being deleted: %w: %w",
				params[idx[0]].IdempotencyKey, job.ErrConflict, job.ErrRefused)
		}
	}
}

// rowsQuerier is what both a pool and a transaction offer.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// jobInsertRows inserts params[idx] in one statement and fills out for
// each job it created. It returns, in input order, the indices whose
// idempotency key was taken (by an earlier job, or by a repeat of the key
// earlier in idx): those were not created.
func jobInsertRows(ctx context.Context, db rowsQuerier, params []JobInsertParams, idx []int, out []JobInsertResult) ([]int, error) {
	n := len(idx)
	names, queues, payloads, keys := make([]string, n), make([]string, n), make([]string, n), make([]*string, n)
	prios, retries, timeouts := make([]int32, n), make([]int32, n), make([]int32, n)
	runAts, delays := make([]*time.Time, n), make([]int64, n)
	statuses, callbacks := make([]string, n), make([]bool, n)
	ckeys := make([]*string, n)
	// traces stays nil (a NULL array, which unnest pads with NULLs) while
	// no job has a trace: the common case allocates nothing for it.
	var traces []*string
	for i, k := range idx {
		// A pointer, not a copy: the arrays point into params, and a copy
		// whose field they pointed to would move to the heap, one per job.
		p := &params[k]
		if p.ConcurrencyKey != "" {
			ckeys[i] = &p.ConcurrencyKey
		}
		if p.TraceParent != "" {
			if traces == nil {
				traces = make([]*string, n)
			}
			traces[i] = &p.TraceParent
		}
		names[i], queues[i], payloads[i] = p.Name, p.Queue, string(p.Payload)
		statuses[i], callbacks[i] = string(job.StatePending), p.Callback
		if p.hasParents() {
			statuses[i] = string(job.StateWaiting)
		}
		if queues[i] == "" {
			queues[i] = "default"
		}
		if len(p.Payload) == 0 {
			payloads[i] = "null"
		}
		if p.IdempotencyKey != "" {
			keys[i] = &p.IdempotencyKey
		}
		prios[i], retries[i], timeouts[i] = int32(p.Priority), int32(p.MaxRetries), int32(p.TimeoutSeconds)
		runAts[i], delays[i] = p.RunAt, millis(p.Delay)
	}
	args := []any{names, queues, prios, payloads, retries, timeouts, keys, runAts, delays, statuses, callbacks, ckeys, traces}
	var rows pgx.Rows
	var err error
	if slices.ContainsFunc(keys, func(k *string) bool { return k != nil }) {
		rows, err = db.Query(ctx, q("JobInsertRows"), args...)
	} else {
		rows, err = db.Query(ctx, q("JobInsertRowsUnkeyed"), args...)
	}
	if err != nil {
		return nil, err
	}
	byKey := map[string]int64{}
	var unkeyed []int64
	var limited map[int64]bool // the few created with a limit_key
	// Scanned into once declared, not per row: Scan's arguments escape,
	// and variables of the loop would move to the heap, three per job.
	var id int64
	var key *string
	var lim bool
	for rows.Next() {
		if err := rows.Scan(&id, &key, &lim); err != nil {
			rows.Close()
			return nil, err
		}
		if lim {
			if limited == nil {
				limited = map[int64]bool{}
			}
			limited[id] = true
		}
		if key == nil {
			unkeyed = append(unkeyed, id)
		} else {
			byKey[*key] = id
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Ids come from one sequence in insertion order, which is input order.
	slices.Sort(unkeyed)
	var missing []int
	for _, k := range idx {
		p := params[k]
		switch {
		case p.IdempotencyKey == "":
			out[k] = JobInsertResult{ID: unkeyed[0], Created: true, State: job.StatePending, Limited: limited[unkeyed[0]]}
			unkeyed = unkeyed[1:]
		case byKey[p.IdempotencyKey] != 0:
			id := byKey[p.IdempotencyKey]
			out[k] = JobInsertResult{ID: id, Created: true, State: job.StatePending, Limited: limited[id]}
			// A repeat of the key later in idx was not created: it is
			// looked up like any earlier job's key.
			delete(byKey, p.IdempotencyKey)
		default:
			missing = append(missing, k)
		}
	}
	return missing, nil
}
