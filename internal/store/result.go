package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// Completion is a successful attempt reported by a worker.
type Completion struct {
	ID         int64
	LeaseToken int64
	WorkerID   string          // the reporting worker; must be the lease's
	Result     json.RawMessage // nil: no result
	// StartedAt is when the handler started, on the worker's clock; zero:
	// unknown. It replaces the lease time in started_at (see startedAt in
	// queries/result.sql).
	StartedAt time.Time
}

// nullTime is t for a timestamptz parameter, nil when t is zero.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Finished describes a job whose attempt was recorded.
type Finished struct {
	ID         int64
	LeaseToken int64 // the lease that ended
	Name       string
	WorkerID   string
	CreatedAt  time.Time
	StartedAt  time.Time
}

// JobCompleteMany records successful attempts in one statement. Only jobs
// still leased under the given token to the given worker change; the others
// are stale results and are left out of the returned list.
func (s *Store) JobCompleteMany(ctx context.Context, epoch int64, cs []Completion) ([]Finished, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	ids, tokens, results := make([]int64, len(cs)), make([]int64, len(cs)), make([]*string, len(cs))
	started, workers := make([]*time.Time, len(cs)), make([]string, len(cs))
	// The start times the NULL-able array points to, one allocation for
	// the batch (nullTime would make one per job).
	startedAt := make([]time.Time, len(cs))
	for i, c := range cs {
		ids[i], tokens[i], workers[i] = c.ID, c.LeaseToken, c.WorkerID
		if !c.StartedAt.IsZero() {
			startedAt[i] = c.StartedAt
			started[i] = &startedAt[i]
		}
		if len(c.Result) > 0 {
			r := string(storableJSON(c.Result))
			results[i] = &r
		}
	}
	rows, err := s.pool.Query(ctx, q("JobCompleteMany"),
		ids, tokens, results, leased, started, workers, epoch)
	if err != nil {
		return nil, fmt.Errorf("complete jobs: %w", interpretError(err))
	}
	return collectFinished(rows, len(cs))
}

func collectFinished(rows pgx.Rows, n int) ([]Finished, error) {
	// f outside the function: Scan's arguments escape, and a variable of
	// the function would move to the heap once per row.
	var f Finished
	out, err := pgx.AppendRows(make([]Finished, 0, n), rows, func(r pgx.CollectableRow) (Finished, error) {
		f = Finished{}
		err := r.Scan(&f.ID, &f.LeaseToken, &f.Name, &f.WorkerID, &f.CreatedAt, &f.StartedAt)
		return f, err
	})
	if err != nil {
		return nil, interpretError(err)
	}
	return out, nil
}

// Failure is an attempt that ended without success.
type Failure struct {
	ID         int64
	LeaseToken int64
	WorkerID   string // the lease's worker
	Error      string
	Reason     string // job.Reason*
	Permanent  bool   // skip the remaining retries
	// Immediate retries without backoff (the attempt was cut short by its
	// worker's death, not by the job).
	Immediate bool
	// StartedAt is when the handler started, on the worker's clock; zero:
	// unknown (see Completion.StartedAt).
	StartedAt time.Time
}

// RetryPolicy decides the wait before a failed job's next attempt.
type RetryPolicy func(attempt int) time.Duration

// FailOutcome is what happened to a failed job.
type FailOutcome struct {
	ID         int64
	LeaseToken int64 // the lease that ended
	Name       string
	Queue      string
	Payload    json.RawMessage
	State      job.State // retrying, failed (dead) or canceled
	Attempts   int
	MaxRetries int
	Error      string
	Reason     string // the attempt's reason; for a dead job the reason it died
	WorkerID   string
	Errors     json.RawMessage
	CreatedAt  time.Time
	StartedAt  time.Time
	Delay      time.Duration
}

// maxErrorLen bounds each stored error message.
const maxErrorLen = 2048

// storableText makes a worker-supplied string acceptable to a PostgreSQL
// text column: NULs dropped, invalid UTF-8 replaced, cut to at most max
// bytes on a character boundary. One unstorable string would otherwise fail
// its whole batch, and the coordinator would retry that batch forever.
func storableText(s string, max int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// storableJSON makes a worker-supplied JSON value acceptable to jsonb,
// which refuses what encoding/json lets through: the escape \u0000, lone
// surrogate escapes and raw invalid UTF-8. Such a value is decoded and
// re-encoded (invalid text becomes U+FFFD, NULs are dropped); any other
// value is returned as is. Invalid JSON is returned as is.
func storableJSON(b []byte) []byte {
	if utf8.Valid(b) && !bytes.Contains(b, []byte(`\u`)) {
		return b
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return b
	}
	out, err := json.Marshal(dropNULs(v))
	if err != nil {
		return b
	}
	return out
}

func dropNULs(v any) any {
	switch x := v.(type) {
	case string:
		return strings.ReplaceAll(x, "\x00", "")
	case []any:
		for i := range x {
			x[i] = dropNULs(x[i])
		}
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[strings.ReplaceAll(k, "\x00", "")] = dropNULs(e)
		}
		return m
	}
	return v
}

// JobFailMany records failed attempts in one transaction: each job still
// leased under its token becomes retrying (next_run_at from the policy, on
// PostgreSQL's clock), failed when its retries are exhausted or the error is
// permanent, or canceled when a cancel was requested. Stale failures are left
// out of the result.
func (s *Store) JobFailMany(ctx context.Context, epoch int64, fs []Failure, policy RetryPolicy) ([]FailOutcome, error) {
	if len(fs) == 0 {
		return nil, nil
	}
	var out []FailOutcome
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = failLeased(ctx, tx, epoch, fs, policy)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fail jobs: %w", interpretError(err))
	}
	return out, nil
}

// failLeased applies failures inside tx; the first statement checks the
// epoch (dts_fence), whose lock then lasts to the end of tx.
func failLeased(ctx context.Context, tx pgx.Tx, epoch int64, fs []Failure, policy RetryPolicy) ([]FailOutcome, error) {
	ids := make([]int64, len(fs))
	for i, f := range fs {
		ids[i] = f.ID
	}
	type current struct {
		token      int64
		worker     string
		attempts   int
		maxRetries int
		cancel     bool
	}
	rows, err := tx.Query(ctx, q("FailLeasedLock"), ids, leased, epoch)
	if err != nil {
		return nil, err
	}
	cur := map[int64]current{}
	for rows.Next() {
		var id int64
		var c current
		if err := rows.Scan(&id, &c.token, &c.worker, &c.attempts, &c.maxRetries, &c.cancel); err != nil {
			rows.Close()
			return nil, err
		}
		cur[id] = c
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var (
		uIDs, uTokens, uDelays              []int64
		uStates, uErrs, uReasons, uDeadWhys []string
		uStarted                            []*time.Time
	)
	for _, f := range fs {
		c, ok := cur[f.ID]
		if !ok || c.token != f.LeaseToken || c.worker != f.WorkerID {
			continue // stale: the lease is gone (or never was this worker's)
		}
		delete(cur, f.ID) // a duplicate in the same batch applies once
		state, why, delay := job.StateRetrying, "", time.Duration(0)
		switch {
		case c.cancel:
			state = job.StateCanceled
		case f.Permanent:
			state, why = job.StateFailed, f.Reason
		case job.Exhausted(c.attempts, c.maxRetries):
			state, why = job.StateFailed, job.ReasonMaxRetriesExceeded
		case !f.Immediate:
			delay = policy(c.attempts)
		}
		msg, reason := storableText(f.Error, maxErrorLen), storableText(f.Reason, maxErrorLen)
		if why == f.Reason {
			why = reason
		}
		uIDs, uTokens, uDelays = append(uIDs, f.ID), append(uTokens, f.LeaseToken), append(uDelays, millis(delay))
		uStates, uErrs, uReasons, uDeadWhys = append(uStates, string(state)), append(uErrs, msg), append(uReasons, reason), append(uDeadWhys, why)
		uStarted = append(uStarted, nullTime(f.StartedAt))
	}
	if len(uIDs) == 0 {
		return nil, nil
	}
	rows, err = tx.Query(ctx, q("FailLeasedUpdate"),
		uIDs, uTokens, uStates, uDelays, uErrs, uReasons, uDeadWhys, leased, uStarted)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailOutcome, error) {
		var o FailOutcome
		var state string
		var delayMs int64
		err := r.Scan(&o.ID, &o.LeaseToken, &o.Name, &o.Queue, (*[]byte)(&o.Payload), &state, &o.Attempts, &o.MaxRetries, &o.Error,
			&o.Reason, &o.WorkerID, &o.Errors, &o.CreatedAt, &o.StartedAt, &delayMs)
		o.State, o.Delay = job.State(state), time.Duration(delayMs)*time.Millisecond
		return o, err
	})
}

// Release is a leased job its worker gives back unrun or interrupted; also
// a lease a reclaim acts on: one (job, token, worker) the leader recorded.
type Release struct {
	ID         int64
	LeaseToken int64
	WorkerID   string
}

// JobReleaseMany makes released jobs pending again at once; the attempt does
// not count. A job whose cancel was requested becomes canceled instead.
// Only jobs still leased under the given token to the given worker change.
func (s *Store) JobReleaseMany(ctx context.Context, epoch int64, rs []Release) ([]int64, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	ids, tokens, workers := make([]int64, len(rs)), make([]int64, len(rs)), make([]string, len(rs))
	for i, r := range rs {
		ids[i], tokens[i], workers[i] = r.ID, r.LeaseToken, r.WorkerID
	}
	rows, err := s.pool.Query(ctx, q("JobReleaseMany"), ids, tokens, leased, workers, epoch)
	if err != nil {
		return nil, fmt.Errorf("release jobs: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("release jobs: %w", interpretError(err))
	}
	return out, nil
}

// Progress is a running attempt's progress report.
type Progress struct {
	ID         int64
	LeaseToken int64
	WorkerID   string // the lease's worker
	Percent    int    // 0..100
	Message    string
}

// JobProgressMany records progress reports in one statement and returns how
// many it applied. Like a result, a report applies only to the job still
// leased under its token to its worker, and only under the current epoch;
// a stale one changes nothing. Give at most one report per job: the latest.
func (s *Store) JobProgressMany(ctx context.Context, epoch int64, ps []Progress) (int, error) {
	if len(ps) == 0 {
		return 0, nil
	}
	ids, tokens, workers := make([]int64, len(ps)), make([]int64, len(ps)), make([]string, len(ps))
	pcts, msgs := make([]int32, len(ps)), make([]string, len(ps))
	for i, p := range ps {
		ids[i], tokens[i], workers[i] = p.ID, p.LeaseToken, p.WorkerID
		pcts[i], msgs[i] = int32(min(max(p.Percent, 0), 100)), storableText(p.Message, maxErrorLen)
	}
	tag, err := s.pool.Exec(ctx, q("JobProgressMany"), ids, tokens, workers, pcts, msgs, leased, epoch)
	if err != nil {
		return 0, fmt.Errorf("record progress: %w", interpretError(err))
	}
	return int(tag.RowsAffected()), nil
}

// StaleResult is a result the applier rejected: its lease had ended, or
// was never its sender's.
type StaleResult struct {
	ID         int64
	LeaseToken int64
	WorkerID   string // as the result named it
	Attempt    int
	Outcome    string // completed, failed, released
}

// Bounds of the stale results recorded in job_events.
const (
	// MaxStaleEventsPerBatch is the most rows JobEventInsertStale writes
	// at once; its caller records only the first ones of a batch.
	MaxStaleEventsPerBatch = 100
	// MaxStaleEventsPerJob is the most stale results one job keeps.
	MaxStaleEventsPerJob = 100
	// maxEventText bounds each string a stale result puts in an event.
	maxEventText = 200
)

// JobEventInsertStale records stale results on their jobs' timelines, at
// most MaxStaleEventsPerBatch of rs (the rest are ignored), at most
// MaxStaleEventsPerJob per job in all, and only for jobs that exist. A
// result that is the one that ended its lease, arriving again, is not
// recorded. It returns how many it recorded.
func (s *Store) JobEventInsertStale(ctx context.Context, epoch int64, rs []StaleResult) (int64, error) {
	rs = rs[:min(len(rs), MaxStaleEventsPerBatch)]
	if len(rs) == 0 {
		return 0, nil
	}
	ids, tokens, attempts := make([]int64, len(rs)), make([]int64, len(rs)), make([]int32, len(rs))
	workers, outcomes := make([]string, len(rs)), make([]string, len(rs))
	for i, r := range rs {
		ids[i], tokens[i], attempts[i] = r.ID, r.LeaseToken, int32(max(min(r.Attempt, 1<<30), 0))
		workers[i], outcomes[i] = storableText(r.WorkerID, maxEventText), storableText(r.Outcome, maxEventText)
	}
	tag, err := s.pool.Exec(ctx, q("JobEventInsertStale"), ids, tokens, workers, attempts, outcomes, epoch, MaxStaleEventsPerJob)
	if err != nil {
		return 0, fmt.Errorf("record stale results: %w", interpretError(err))
	}
	return tag.RowsAffected(), nil
}
