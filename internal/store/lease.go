package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

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

// Claimed is a job just leased to a worker.
type Claimed struct {
	ID             int64
	Name           string
	Queue          string
	Payload        json.RawMessage
	Attempt        int
	MaxRetries     int
	TimeoutSeconds int
	LeaseToken     int64
	WorkerID       string
	CreatedAt      time.Time
}

// JobClaimParams says how many due jobs to lease and to whom.
type JobClaimParams struct {
	// Epoch is the claiming leader's epoch (see dts_fence).
	Epoch int64
	// Types limits the claim to these job names; nil claims any name.
	Types []string
	// Slots names the worker for each claimed job in order: the first due
	// job goes to Slots[0], the next to Slots[1], and so on. Its length is
	// the most jobs claimed.
	Slots []string
	// Lease is how long the lease lasts unless heartbeats extend it.
	Lease time.Duration
}

// JobClaimBatch leases up to len(Slots) due jobs in priority, due-time, id
// order, skipping rows other claimers hold. Each gets a fresh fencing token
// (NewLeaseTokens) and its attempt count grows by one. A deposed leader's
// claim fails with job.ErrDeposed and leases nothing.
//
// It is one call of dts_claim_jobs (functions.sql): one round trip and one
// commit, which matters because the claim is on the path of every job's
// start. Inside, two statements: lock the due rows, then update exactly
// those by primary key from an unnest of ids and workers. A single statement
// joining the locked rows back to jobs let the generic plan guess the
// LIMIT's size from the statistics (10% of the table) and hash-join against
// a sequential scan of the whole table once it was large: 100-200 ms per
// claim on a 1M backlog, 5,700 jobs/s instead of 25,000. An unnest of ids is
// estimated at a handful of rows, so it always becomes primary-key lookups.
func (s *Store) JobClaimBatch(ctx context.Context, p JobClaimParams) ([]Claimed, error) {
	if len(p.Slots) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT id, name, queue, payload, attempts, max_retries, timeout_seconds,
			lease_token, worker_id, created_at
		FROM dts_claim_jobs($1, $2, $3, $4, $5)`, p.Epoch, p.Types, p.Slots, NewLeaseTokens(len(p.Slots)), millis(p.Lease))
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claimed, error) {
		var c Claimed
		err := r.Scan(&c.ID, &c.Name, &c.Queue, &c.Payload, &c.Attempt, &c.MaxRetries, &c.TimeoutSeconds,
			&c.LeaseToken, &c.WorkerID, &c.CreatedAt)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", interpretError(err))
	}
	// RETURNING order is not guaranteed; callers map jobs to workers by
	// WorkerID, and slot order is kept by the function's ids.
	return out, nil
}

// NewLeaseTokens returns n fencing tokens: random, positive 63-bit
// numbers from crypto/rand. A token is the only secret that ties a result
// to its lease, so it must not be guessable from another lease's token.
func NewLeaseTokens(n int) []int64 {
	buf := make([]byte, 8*n)
	_, _ = rand.Read(buf) // crypto/rand.Read never fails (Go 1.24+)
	out := make([]int64, n)
	for i := range out {
		t := int64(binary.LittleEndian.Uint64(buf[8*i:]) >> 1)
		if t == 0 {
			t = 1 // 0 means "no token" in the registry
		}
		out[i] = t
	}
	return out
}

// Completion is a successful attempt reported by a worker.
type Completion struct {
	ID         int64
	LeaseToken int64
	WorkerID   string          // the reporting worker; must be the lease's
	Result     json.RawMessage // nil: no result
	// StartedAt is when the handler started, on the worker's clock; zero:
	// unknown. It replaces the lease time in started_at (see startedAtSQL).
	StartedAt time.Time
}

// startedAtSQL is the started_at a finished attempt records: the handler's
// start as its worker reported it (u.started), kept between the lease time
// and now so that a worker's skewed clock cannot put it outside the attempt.
// NULL (unknown) keeps the lease time.
const startedAtSQL = `CASE WHEN u.started IS NULL THEN j.started_at
				ELSE least(greatest(u.started, j.started_at), now()) END`

// nullTime is t for a timestamptz parameter, nil when t is zero.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Finished describes a job whose attempt was recorded.
type Finished struct {
	ID        int64
	Name      string
	WorkerID  string
	CreatedAt time.Time
	StartedAt time.Time
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
	for i, c := range cs {
		ids[i], tokens[i], started[i], workers[i] = c.ID, c.LeaseToken, nullTime(c.StartedAt), c.WorkerID
		if len(c.Result) > 0 {
			r := string(storableJSON(c.Result))
			results[i] = &r
		}
	}
	rows, err := s.pool.Query(ctx, `
		UPDATE jobs j SET status = 'completed', result = u.result::jsonb, finished_at = now(),
			started_at = `+startedAtSQL+`,
			lease_token = NULL, lease_expires_at = NULL
		FROM unnest($1::bigint[], $2::bigint[], $3::text[], $5::timestamptz[], $6::text[]) AS u(id, token, result, started, worker)
		WHERE j.id = u.id AND j.status = $4 AND j.lease_token = u.token AND j.worker_id = u.worker
		  AND (SELECT dts_fence($7))
		RETURNING j.id, j.name, coalesce(j.worker_id, ''), j.created_at, coalesce(j.started_at, j.created_at)`,
		ids, tokens, results, leased, started, workers, epoch)
	if err != nil {
		return nil, fmt.Errorf("complete jobs: %w", interpretError(err))
	}
	return collectFinished(rows)
}

func collectFinished(rows pgx.Rows) ([]Finished, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Finished, error) {
		var f Finished
		err := r.Scan(&f.ID, &f.Name, &f.WorkerID, &f.CreatedAt, &f.StartedAt)
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
	rows, err := tx.Query(ctx, `SELECT id, lease_token, coalesce(worker_id, ''), attempts, max_retries, cancel_requested
		FROM jobs WHERE id = ANY($1) AND status = $2 AND (SELECT dts_fence($3)) ORDER BY id FOR UPDATE`, ids, leased, epoch)
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
	rows, err = tx.Query(ctx, `
		UPDATE jobs j SET status = u.state,
			next_run_at = CASE WHEN u.state = 'retrying' THEN now() + u.delay_ms * interval '1 millisecond' ELSE j.next_run_at END,
			finished_at = CASE WHEN u.state = 'retrying' THEN NULL ELSE now() END,
			last_error = u.err,
			errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempts, 'error', u.err,
				'reason', u.reason, 'worker_id', j.worker_id, 'at', now())),
			dead_reason = nullif(u.dead_why, ''),
			started_at = `+startedAtSQL+`,
			lease_token = NULL, lease_expires_at = NULL
		FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[], $9::timestamptz[])
			AS u(id, token, state, delay_ms, err, reason, dead_why, started)
		WHERE j.id = u.id AND j.status = $8 AND j.lease_token = u.token
		RETURNING j.id, u.token, j.name, j.queue, j.payload, j.status, j.attempts, j.max_retries, u.err,
			coalesce(nullif(u.dead_why, ''), u.reason), coalesce(j.worker_id, ''), j.errors,
			j.created_at, coalesce(j.started_at, j.created_at), u.delay_ms`,
		uIDs, uTokens, uStates, uDelays, uErrs, uReasons, uDeadWhys, leased, uStarted)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailOutcome, error) {
		var o FailOutcome
		var state string
		var delayMs int64
		err := r.Scan(&o.ID, &o.LeaseToken, &o.Name, &o.Queue, &o.Payload, &state, &o.Attempts, &o.MaxRetries, &o.Error,
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
	rows, err := s.pool.Query(ctx, `
		UPDATE jobs j SET
			status = CASE WHEN j.cancel_requested THEN 'canceled' ELSE 'pending' END,
			finished_at = CASE WHEN j.cancel_requested THEN now() END,
			attempts = greatest(j.attempts - 1, 0), next_run_at = now(),
			lease_token = NULL, lease_expires_at = NULL
		FROM unnest($1::bigint[], $2::bigint[], $4::text[]) AS u(id, token, worker)
		WHERE j.id = u.id AND j.status = $3 AND j.lease_token = u.token AND j.worker_id = u.worker
		  AND (SELECT dts_fence($5))
		RETURNING j.id`, ids, tokens, leased, workers, epoch)
	if err != nil {
		return nil, fmt.Errorf("release jobs: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("release jobs: %w", interpretError(err))
	}
	return out, nil
}

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
// lock does not take leases that heartbeats extended meanwhile.
func (s *Store) JobReclaimExpired(ctx context.Context, epoch int64, policy RetryPolicy) ([]FailOutcome, error) {
	var out []FailOutcome
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, lease_token, coalesce(worker_id, '') FROM jobs
			WHERE status = 'leased' AND lease_expires_at < now() AND (SELECT dts_fence($1))
			ORDER BY lease_expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED`, epoch)
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

// JobCleanup deletes, in batches of up to batch rows, completed and canceled
// jobs finished more than doneAge ago and failed ones finished more than
// failedAge ago. It returns how many rows it deleted. A batch of 0 or less
// means 1000 (LIMIT 0 would delete nothing and loop forever).
func (s *Store) JobCleanup(ctx context.Context, epoch int64, doneAge, failedAge time.Duration, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM jobs WHERE (SELECT dts_fence($4)) AND id IN (
			SELECT id FROM jobs WHERE status IN ('completed', 'canceled') AND finished_at < now() - $1 * interval '1 millisecond'
			UNION ALL
			SELECT id FROM jobs WHERE status = 'failed' AND finished_at < now() - $2 * interval '1 millisecond'
			LIMIT $3)`, millis(doneAge), millis(failedAge), batch, epoch)
		if err != nil {
			return total, fmt.Errorf("clean up jobs: %w", interpretError(err))
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) || ctx.Err() != nil {
			return total, nil
		}
	}
}
