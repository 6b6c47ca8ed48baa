package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// scanJob reads the columns of the fragment jobColumns
// (queries/job_api.sql), in its order.
func scanJob(row pgx.Row) (*job.Job, error) {
	var j job.Job
	var errs []byte
	var state string
	if err := row.Scan(&j.ID, &j.Name, &j.Queue, &j.Priority, &j.Payload, &state, &j.Attempts, &j.MaxRetries,
		&j.TimeoutSeconds, &j.IdempotencyKey, &j.LastError, &errs, &j.Result, &j.WorkerID, &j.LeaseToken,
		&j.CancelRequest, &j.CreatedAt, &j.StartedAt, &j.FinishedAt, &j.NextRunAt, &j.Progress, &j.ProgressMessage,
		&j.LimitKey, &j.DeadReason, &j.LeaseExpiresAt, &j.LeaseExtensions, &j.LastLeaseToken, &j.TraceParent); err != nil {
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
