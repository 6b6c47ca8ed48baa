package store

import (
	"context"
	"encoding/json"
	"errors"
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

// scanJob reads the columns of the fragment jobColumns
// (queries/job_api.sql), in its order.
func scanJob(row pgx.Row) (*job.Job, error) {
	var j job.Job
	var errs []byte
	var state string
	if err := row.Scan(&j.ID, &j.Name, &j.Queue, &j.Priority, &j.Payload, &state, &j.Attempts, &j.MaxRetries,
		&j.TimeoutSeconds, &j.IdempotencyKey, &j.LastError, &errs, &j.Result, &j.WorkerID, &j.LeaseToken,
		&j.CancelRequest, &j.CreatedAt, &j.StartedAt, &j.FinishedAt, &j.NextRunAt, &j.Progress, &j.ProgressMessage,
		&j.LimitKey, &j.DeadReason, &j.LeaseExpiresAt, &j.LeaseExtensions, &j.LastLeaseToken); err != nil {
		return nil, interpretError(err)
	}
	j.State = job.State(state)
	if len(errs) > 0 {
		if err := json.Unmarshal(errs, &j.Errors); err != nil {
			return nil, fmt.Errorf("decode errors of job %d: %w", j.ID, err)
		}
	}
	return &j, nil
}

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
	for i, k := range idx {
		p := params[k]
		if p.ConcurrencyKey != "" {
			ckeys[i] = &p.ConcurrencyKey
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
			key := p.IdempotencyKey
			keys[i] = &key
		}
		prios[i], retries[i], timeouts[i] = int32(p.Priority), int32(p.MaxRetries), int32(p.TimeoutSeconds)
		runAts[i], delays[i] = p.RunAt, millis(p.Delay)
	}
	args := []any{names, queues, prios, payloads, retries, timeouts, keys, runAts, delays, statuses, callbacks, ckeys}
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
	for rows.Next() {
		var id int64
		var key *string
		var lim bool
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

// JobGet returns one job, or job.ErrNotFound.
func (s *Store) JobGet(ctx context.Context, id int64) (*job.Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, q("JobGet"), id))
	if err != nil {
		return nil, fmt.Errorf("get job %d: %w", id, err)
	}
	return j, nil
}

// JobGetByKey returns the job holding idempotency key key
// (job.ErrNotFound when none does).
func (s *Store) JobGetByKey(ctx context.Context, key string) (*job.Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, q("JobGetByKey"), key))
	if err != nil {
		return nil, fmt.Errorf("get job by key: %w", err)
	}
	return j, nil
}

// JobSearchParams is a search: the jobs List's filters select that pass
// Scan's tests.
type JobSearchParams struct {
	List JobListParams // filters, Before, Limit (required) and MaxBytes as JobList's
	Scan JobScan
	// Budget is how long the search may go on; at its end the search stops
	// between two steps and says where. Required.
	Budget time.Duration
	// Span is how many ids one step covers; 0 or less: DefaultSearchSpan.
	Span int64
}

// JobScan holds the tests of a search that no index serves, so that
// JobSearch reads the jobs for them in steps; zero values test nothing.
type JobScan struct {
	Text string // the payload's JSON text holds it
	// Path and PathValue: the payload's value at Path (object keys or
	// array indexes) is PathValue as text (PostgreSQL's #>>): a string
	// without its quotes, a number or true/false as written.
	Path      []string
	PathValue string
	Worker    string // the job's worker (of its lease, or of its last attempt) is this one
	Error     string // the job's last error holds it, in any case
}

// Empty says whether s tests nothing.
func (s JobScan) Empty() bool {
	return s.Text == "" && s.Path == nil && s.Worker == "" && s.Error == ""
}

// DefaultSearchSpan is JobSearchParams.Span's default: a step reads at
// most this many rows (about 30 ms on a million jobs).
const DefaultSearchSpan = 50_000

// JobSearchResult is a page of a search.
type JobSearchResult struct {
	Jobs []*job.Job
	// Next is the Before of the next page (0: the search reached the
	// oldest job). Stopped: the budget ran out before the page filled;
	// the jobs below Next are not searched yet.
	Next    int64
	Stopped bool
}

// JobSearch searches the jobs p.List selects for those that pass p.Scan,
// newest first, a step of p.Span ids at a time until p.List.Limit jobs
// are found, the oldest job is reached or p.Budget runs out.
func (s *Store) JobSearch(ctx context.Context, p JobSearchParams) (JobSearchResult, error) {
	if p.Span <= 0 {
		p.Span = DefaultSearchSpan
	}
	sctx, cancel := context.WithTimeout(ctx, p.Budget)
	defer cancel()
	var res JobSearchResult
	hi := p.List.Before
	if hi <= 0 {
		// The newest id, from jobs_pkey: outside the budget, so that a
		// search stopped at once still says where to go on.
		if err := s.pool.QueryRow(ctx, q("JobSearchTop")).Scan(&hi); err != nil {
			return res, fmt.Errorf("search jobs: %w", interpretError(err))
		}
	}
	size := 0 // the page's bytes as jobBytes counts them
	for hi > 1 {
		lo := max(hi-p.Span, 1)
		rows, err := s.pool.Query(sctx, q("JobSearchStep"), hi, string(p.List.State), p.List.Name,
			p.List.Limit-len(res.Jobs), p.List.Queue, lo, p.Scan.Text, p.List.Fingerprint, p.Scan.Path, p.Scan.PathValue,
			p.Scan.Worker, p.Scan.Error)
		var found []*job.Job
		full := false // p.List.MaxBytes reached
		if err == nil {
			room := 0
			if p.List.MaxBytes > 0 {
				room = max(p.List.MaxBytes-size, 1)
			}
			found, full, err = collectPage(rows, 0, room, func(row pgx.Rows) (*job.Job, error) { return scanJob(row) },
				func(j *job.Job) *job.Job { return j })
			if len(res.Jobs) > 0 && len(found) > 0 && room > 0 && jobBytes(found[0]) > room {
				found, full = nil, true // collectPage takes a page's first job whatever its size
			}
		}
		if err != nil {
			if sctx.Err() != nil && ctx.Err() == nil { // the budget, not the caller, ended it
				res.Next, res.Stopped = hi, true
				return res, nil
			}
			return res, fmt.Errorf("search jobs: %w", interpretError(err))
		}
		res.Jobs = append(res.Jobs, found...)
		for _, j := range found {
			size += jobBytes(j)
		}
		if full && len(res.Jobs) > 0 {
			res.Next = res.Jobs[len(res.Jobs)-1].ID
			return res, nil
		}
		if len(res.Jobs) >= p.List.Limit {
			res.Next = res.Jobs[len(res.Jobs)-1].ID
			return res, nil
		}
		hi = lo
		if hi > 1 && sctx.Err() != nil {
			res.Next, res.Stopped = hi, true
			return res, nil
		}
	}
	return res, nil
}

// JobListParams filters a listing; zero values mean no filter.
type JobListParams struct {
	State job.State
	Name  string
	Queue string
	// Fingerprint keeps the dead jobs whose error has this fingerprint
	// (dts_error_fingerprint): with Name, one dead-letter group. JobList
	// takes it only with Name (the group's index needs both); a payload
	// search takes it alone too.
	Fingerprint string
	Before      int64 // cursor: only ids below this
	Limit       int   // 0 or less: no limit
	// MaxBytes bounds the bytes of the page's jobs as jobBytes counts
	// them; 0 or less: no bound. The page ends before the job that would
	// pass it (the first job is always in), and the cursor then leads on.
	MaxBytes int
}

// errFingerprintNeedsName refuses a list by fingerprint without a name:
// a dead-letter group is a name and a fingerprint, and its index needs both.
var errFingerprintNeedsName = errors.New("a fingerprint filter needs a name filter")

// JobList returns jobs newest first, and the cursor for the next page (0 at the end).
func (s *Store) JobList(ctx context.Context, p JobListParams) ([]*job.Job, int64, error) {
	if p.Before <= 0 {
		p.Before = 1<<63 - 1
	}
	var limit *int // NULL: no limit
	if p.Limit > 0 {
		n := p.Limit + 1
		limit = &n
	}
	var rows pgx.Rows
	var err error
	switch {
	case p.Fingerprint == "":
		rows, err = s.pool.Query(ctx, q("JobList"), p.Before, string(p.State), p.Name, limit, p.Queue)
	case p.Name == "":
		return nil, 0, fmt.Errorf("list jobs: %w", errFingerprintNeedsName)
	default:
		rows, err = s.pool.Query(ctx, q("JobListDeadGroup"), p.Before, string(p.State), p.Name, limit, p.Queue, p.Fingerprint)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", interpretError(err))
	}
	out, more, err := collectPage(rows, p.Limit, p.MaxBytes, func(row pgx.Rows) (*job.Job, error) { return scanJob(row) },
		func(j *job.Job) *job.Job { return j })
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", err)
	}
	var next int64
	if more {
		next = out[len(out)-1].ID
	}
	return out, next, nil
}

// jobBytes is what a job weighs in a listing: its payload, result and
// error texts, the parts whose size the API does not bound tightly.
func jobBytes(j *job.Job) int {
	n := len(j.Payload) + len(j.Result) + len(j.LastError)
	for _, e := range j.Errors {
		n += len(e.Error)
	}
	return n
}

// collectPage scans rows into a page of at most limit items (no bound if
// limit ≤ 0) whose jobs weigh at most maxBytes (no bound if ≤ 0; the first
// item always fits), and says whether more rows follow. The query must ask
// for limit+1 rows. It stops reading at the page's end, so no more than
// one item past the bound is ever held.
func collectPage[T any](rows pgx.Rows, limit, maxBytes int, scan func(pgx.Rows) (T, error), jobOf func(T) *job.Job) ([]T, bool, error) {
	defer rows.Close()
	var out []T
	size, more := 0, false
	for rows.Next() {
		item, err := scan(rows)
		if err != nil {
			return nil, false, err
		}
		if limit > 0 && len(out) == limit {
			more = true
			break
		}
		w := jobBytes(jobOf(item))
		if maxBytes > 0 && len(out) > 0 && size+w > maxBytes {
			more = true
			break
		}
		size += w
		out = append(out, item)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, interpretError(err)
	}
	return out, more, nil
}

// CancelResult says what JobCancel did.
type CancelResult struct {
	State      job.State // canceled, or leased when the running attempt must be stopped
	WorkerID   string    // for a leased job: the worker to tell
	LeaseToken int64
}

// JobCancel cancels a pending or retrying job at once; for a leased job it
// records the request (the attempt's outcome then becomes canceled, and it is
// never retried) and returns the worker to tell. A job already final gives
// job.ErrConflict, an unknown id job.ErrNotFound.
//
// The UPDATE decides on the row as it is when it gets the row's lock: when
// a claim or a failed attempt changes the job meanwhile, PostgreSQL
// re-checks the WHERE and recomputes the SET on the new version, so the
// cancel applies to the new state. A job that became live again after the
// statement's snapshot (requeued from the DLQ) is not seen by it; the state
// is then read again and the statement retried, a few times at most.
func (s *Store) JobCancel(ctx context.Context, id int64) (CancelResult, error) {
	const attempts = 3
	var res CancelResult
	for range attempts {
		err := s.pool.QueryRow(ctx, q("JobCancel"), id).Scan(&res.State, &res.WorkerID, &res.LeaseToken)
		if err == nil {
			return res, nil
		}
		if err = interpretError(err); err != job.ErrNotFound {
			return res, fmt.Errorf("cancel job %d: %w", id, err)
		}
		j, err := s.JobGet(ctx, id)
		if err != nil {
			return res, fmt.Errorf("cancel job %d: %w", id, err)
		}
		if j.State.Final() {
			return res, fmt.Errorf("cancel job %d: already final: %w", id, job.ErrConflict)
		}
	}
	return res, fmt.Errorf("cancel job %d: its state kept changing: %w", id, job.ErrConflict)
}

// JobRequeueDead makes a failed (dead) job pending again with its attempts
// reset; its error history stays. A payload, when not nil, replaces the
// job's (the caller has checked it: job.NormalizeJSON); nil keeps it. Other
// states give job.ErrConflict, and nothing changes.
func (s *Store) JobRequeueDead(ctx context.Context, id int64, payload json.RawMessage) error {
	var text *string // NULL: keep the payload
	if payload != nil {
		t := string(payload)
		text = &t
	}
	tag, err := s.pool.Exec(ctx, q("JobRequeueDead"), id, text)
	if err != nil {
		return fmt.Errorf("requeue job %d: %w", id, interpretError(err))
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := s.JobGet(ctx, id); err != nil {
		return fmt.Errorf("requeue job %d: %w", id, err)
	}
	return fmt.Errorf("requeue job %d: not in the dead-letter queue: %w", id, job.ErrConflict)
}

// DeadJob is a job in the dead-letter queue.
type DeadJob struct {
	Job    *job.Job
	Reason string
	// Fingerprint is its error's (dts_error_fingerprint); "" for a job
	// made dead by hand, outside the store.
	Fingerprint string
}

// DeadList returns failed jobs, the most recently failed first.
func (s *Store) DeadList(ctx context.Context, limit int) ([]DeadJob, error) {
	dead, _, err := s.DeadListPage(ctx, DeadListParams{Limit: limit})
	return dead, err
}

// DeadCursor is where a page of the DLQ ends: the last entry's finished_at
// and id.
type DeadCursor struct {
	FinishedAt time.Time
	ID         int64
}

// DeadListParams selects a page of the DLQ.
type DeadListParams struct {
	After    *DeadCursor // nil: from the most recently failed
	Limit    int         // most entries; 0 or less: no limit
	MaxBytes int         // as in JobListParams
}

// DeadListPage returns failed jobs, the most recently failed first (ties:
// the newest id first), and the cursor of the next page (nil at the end).
func (s *Store) DeadListPage(ctx context.Context, p DeadListParams) ([]DeadJob, *DeadCursor, error) {
	var limit *int // NULL: no limit
	if p.Limit > 0 {
		n := p.Limit + 1
		limit = &n
	}
	var afterAt *time.Time
	var afterID int64
	if p.After != nil {
		afterAt, afterID = &p.After.FinishedAt, p.After.ID
	}
	rows, err := s.pool.Query(ctx, q("DeadListPage"), afterAt, afterID, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("list dead jobs: %w", interpretError(err))
	}
	out, more, err := collectPage(rows, p.Limit, p.MaxBytes, func(row pgx.Rows) (DeadJob, error) {
		var d DeadJob
		var err error
		d.Job, err = scanJob(scanTail{row, []any{&d.Reason, &d.Fingerprint}})
		return d, err
	}, func(d DeadJob) *job.Job { return d.Job })
	if err != nil {
		return nil, nil, fmt.Errorf("list dead jobs: %w", err)
	}
	if !more {
		return out, nil, nil
	}
	last := out[len(out)-1].Job
	var at time.Time
	if last.FinishedAt != nil {
		at = *last.FinishedAt
	}
	return out, &DeadCursor{FinishedAt: at, ID: last.ID}, nil
}

// scanTail appends extra destinations after the job columns.
type scanTail struct {
	row  pgx.Row
	tail []any
}

func (s scanTail) Scan(dest ...any) error { return s.row.Scan(append(dest, s.tail...)...) }

// DeadGroup is the dead jobs of one name whose errors have one
// fingerprint (dts_error_fingerprint).
type DeadGroup struct {
	Name string
	// Fingerprint is "" for dead jobs without one (made dead outside the
	// store): such a group cannot be selected by fingerprint.
	Fingerprint string
	Count       int64
	LastFailed  time.Time // the newest failure of the group
	NewestID    int64     // the group's newest job (highest id)
	Sample      string    // that job's error, as stored
}

// DeadGroups is the DLQ's largest groups and how many there are.
type DeadGroups struct {
	Groups []DeadGroup // the largest first (ties: the most recently failed)
	Total  int64       // groups in all
	Dead   int64       // dead jobs in all
}

// DeadGroups returns the limit largest groups of dead jobs by name and
// error fingerprint. It reads every dead job's index entry: callers share
// its answer for a while (the console caches it) rather than run it per
// viewer.
func (s *Store) DeadGroups(ctx context.Context, limit int) (DeadGroups, error) {
	rows, err := s.pool.Query(ctx, q("DeadGroups"), limit)
	if err != nil {
		return DeadGroups{}, fmt.Errorf("group dead jobs: %w", interpretError(err))
	}
	var out DeadGroups
	out.Groups, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadGroup, error) {
		var g DeadGroup
		var fp *string
		var last *time.Time
		err := r.Scan(&g.Name, &fp, &g.Count, &last, &g.NewestID, &g.Sample, &out.Total, &out.Dead)
		if fp != nil {
			g.Fingerprint = *fp
		}
		if last != nil {
			g.LastFailed = *last
		}
		return g, err
	})
	if err != nil {
		return DeadGroups{}, fmt.Errorf("group dead jobs: %w", interpretError(err))
	}
	return out, nil
}

// JobCountState counts the jobs in one state.
func (s *Store) JobCountState(ctx context.Context, state job.State) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, q("JobCountState"), string(state)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s jobs: %w", state, interpretError(err))
	}
	return n, nil
}

// Stats is a snapshot of the system for /stats and the metrics.
type Stats struct {
	ByState          map[job.State]int64
	QueueDepth       int64 // pending or retrying and due now
	DeadDepth        int64 // failed
	WorkersByState   map[string]int64
	OldestPendingAge float64 // seconds the oldest due job has waited; 0 if none
	// Unhandled counts pending and retrying jobs (due or not) by name, for
	// the names no live worker (available or busy) handles, "*" handling
	// every name: the MaxUnhandledNames largest; UnhandledOther sums the
	// rest. Live means as the leader last wrote the workers table (every
	// second); with no leader it goes stale.
	Unhandled      map[string]int64
	UnhandledOther int64
	// Starved maps each name whose oldest due job has waited longer than
	// StarvedAfter although a worker handling it has a free slot (as the
	// leader last wrote the workers table) to that wait in seconds: at most
	// MaxUnhandledNames names, the longest waits. Jobs with a limit_key and
	// jobs of paused or capped queues are not counted: they may wait by
	// design.
	Starved map[string]float64
}

// MaxUnhandledNames bounds Stats.Unhandled and Stats.Starved: submitted
// names are user input.
const MaxUnhandledNames = 100

// StarvedAfter is how long a due job may wait beside a free worker that
// handles its name before Stats.Starved names it. Dispatch leases such a
// job within one round (milliseconds); the margin covers the leader's
// worker sync (every second) and a change of leader.
const StarvedAfter = 30 * time.Second

// JobCountDue counts the due jobs waiting for a worker (pending or
// retrying, due now), stopping at limit: the cost is bounded by the limit,
// not by the backlog, so it can run every second whatever the table holds.
// It reads only jobs_queue_due_idx (every waiting job: jobs_due_idx holds
// only those without a limit_key).
func (s *Store) JobCountDue(ctx context.Context, limit int64) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A sequential scan would read every finished job before it
		// stops; the partial index holds only the waiting ones.
		if _, err := tx.Exec(ctx, q("JobCountDueSeqscanOff")); err != nil {
			return err
		}
		return tx.QueryRow(ctx, q("JobCountDue"), limit).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("count due jobs: %w", interpretError(err))
	}
	return n, nil
}

// StatsGet counts jobs by state, the due queue, the DLQ, workers by state
// and the waiting jobs no live worker handles, by name. Counting every job
// by state reads the whole table, so it runs with sequential scans on even
// in a pool opened with PinIndexPlans; the unhandled count, last, turns
// them off again to read only the waiting jobs through jobs_queue_due_idx.
func (s *Store) StatsGet(ctx context.Context) (Stats, error) {
	st := Stats{ByState: map[job.State]int64{}, WorkersByState: map[string]int64{}, Unhandled: map[string]int64{},
		Starved: map[string]float64{}}
	for _, v := range job.States {
		st.ByState[v] = 0
	}
	for _, v := range []string{"available", "busy", "unavailable", "draining"} {
		st.WorkersByState[v] = 0
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, q("StatsGetSeqscanOn")); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, q("StatsGetByState"))
		if err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
		for rows.Next() {
			var state string
			var n int64
			if err := rows.Scan(&state, &n); err != nil {
				rows.Close()
				return fmt.Errorf("count jobs: %w", err)
			}
			st.ByState[job.State(state)] = n
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
		st.DeadDepth = st.ByState[job.StateFailed]
		rows, err = tx.Query(ctx, q("StatsGetWorkers"))
		if err != nil {
			return fmt.Errorf("count workers: %w", err)
		}
		for rows.Next() {
			var state string
			var n int64
			if err := rows.Scan(&state, &n); err != nil {
				rows.Close()
				return fmt.Errorf("count workers: %w", err)
			}
			st.WorkersByState[state] = n
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("count workers: %w", err)
		}
		if _, err := tx.Exec(ctx, q("StatsGetSeqscanOff")); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, q("StatsGetDue")).Scan(&st.QueueDepth, &st.OldestPendingAge); err != nil {
			return fmt.Errorf("count due jobs: %w", err)
		}
		rows, err = tx.Query(ctx, q("StatsGetUnhandled"), MaxUnhandledNames)
		if err != nil {
			return fmt.Errorf("count unhandled jobs: %w", err)
		}
		for rows.Next() {
			var name *string
			var n int64
			if err := rows.Scan(&name, &n); err != nil {
				rows.Close()
				return fmt.Errorf("count unhandled jobs: %w", err)
			}
			if name == nil {
				st.UnhandledOther = n
			} else {
				st.Unhandled[*name] = n
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("count unhandled jobs: %w", err)
		}
		rows, err = tx.Query(ctx, q("StatsGetStarved"), StarvedAfter.Seconds(), MaxUnhandledNames)
		if err != nil {
			return fmt.Errorf("find starved names: %w", err)
		}
		for rows.Next() {
			var name string
			var waited float64
			if err := rows.Scan(&name, &waited); err != nil {
				rows.Close()
				return fmt.Errorf("find starved names: %w", err)
			}
			st.Starved[name] = waited
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("find starved names: %w", err)
		}
		return nil
	})
	return st, interpretError(err)
}
