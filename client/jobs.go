package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

// The API's types, re-exported so that programs outside this repository can
// name them (docs/api.md describes every field).
type (
	// Job is a job as GET /jobs/{id} shows it. Payload and Result are raw JSON.
	Job = wire.Job
	// AttemptError is what one failed attempt left in Job.Errors.
	AttemptError = wire.AttemptError
	// Submitted answers a submission, a cancel and a requeue: the job's id
	// and status (and, after a cancel of a running job, CancelRequested).
	Submitted = wire.SubmitResponse
	// JobPage is one page of List; NextCursor is nil on the last page.
	JobPage = wire.JobListResponse
	// DLQJob is a failed job and why it died ("permanent" or "max_retries_exceeded").
	DLQJob = wire.DLQJob
	// DLQPage is one page of DLQ; NextCursor is nil on the last page.
	DLQPage = wire.DLQResponse
	// Stats answers GET /stats.
	Stats = wire.StatsResponse
	// JobTimeline answers GET /jobs/{id}/timeline: the job, each of its
	// attempts and its timeline (docs/api.md).
	JobTimeline = wire.JobTimeline
	// Attempt is one attempt of a JobTimeline.
	Attempt = wire.Attempt
	// TimelineEntry is one line of a JobTimeline, oldest first.
	TimelineEntry = wire.TimelineEntry
)

// Job statuses.
const (
	StatusWaiting   = string(job.StateWaiting) // its parents (depends_on) are not done yet
	StatusPending   = string(job.StatePending)
	StatusLeased    = string(job.StateLeased)
	StatusRetrying  = string(job.StateRetrying)
	StatusCompleted = string(job.StateCompleted)
	StatusFailed    = string(job.StateFailed)
	StatusCanceled  = string(job.StateCanceled)
)

// Terminal reports whether a job in status will not change on its own:
// completed, failed or canceled. (A failed job changes again only if it is
// requeued.)
func Terminal(status string) bool { return job.State(status).Final() }

// Option sets one optional field of a submission.
type Option struct{ apply func(*wire.SubmitRequest) }

// Queue sets the job's queue (default "default"). It is shown to handlers
// and does not affect scheduling.
func Queue(name string) Option { return Option{func(r *wire.SubmitRequest) { r.Queue = name }} }

// Priority sets the priority, -1000..1000 (default 0); higher runs first.
func Priority(p int) Option { return Option{func(r *wire.SubmitRequest) { r.Priority = &p }} }

// MaxRetries sets how many retries follow a failed first attempt, 0..100
// (default 3).
func MaxRetries(n int) Option { return Option{func(r *wire.SubmitRequest) { r.MaxRetries = &n }} }

// Delay makes the first attempt due d from now (by the server's clock),
// rounded up to whole seconds. Not with RunAt.
func Delay(d time.Duration) Option {
	s := ceilSeconds(d)
	return Option{func(r *wire.SubmitRequest) { r.DelaySeconds = &s }}
}

// RunAt makes the first attempt due at t. Not with Delay.
func RunAt(t time.Time) Option {
	s := t.UTC().Format(time.RFC3339Nano)
	return Option{func(r *wire.SubmitRequest) { r.RunAt = &s }}
}

// Timeout bounds each attempt, rounded up to whole seconds (at most 24h;
// default none).
func Timeout(d time.Duration) Option {
	s := int(ceilSeconds(d))
	return Option{func(r *wire.SubmitRequest) { r.TimeoutSeconds = &s }}
}

// IdempotencyKey makes a repeated submission with the same key return the
// first job instead of creating another (at most 200 characters). It also
// lets the client retry the submission when the server could not say
// whether it was stored.
func IdempotencyKey(key string) Option {
	return Option{func(r *wire.SubmitRequest) { r.IdempotencyKey = key }}
}

// DependsOn makes the job wait (status "waiting") until every job named
// by id has completed; when one fails for good or is canceled, this job is
// canceled. An unknown id is ErrUnknownDependency. At most 1000 parents.
func DependsOn(ids ...string) Option {
	return Option{func(r *wire.SubmitRequest) {
		for _, id := range ids {
			r.DependsOn = append(r.DependsOn, json.RawMessage(strconv.Quote(id)))
		}
	}}
}

// DependsOnIndex makes a job of SubmitBatch wait on earlier jobs of the
// same batch, named by their index in it (each below the job's own), like
// DependsOn. Elsewhere the server refuses it.
func DependsOnIndex(idx ...int) Option {
	return Option{func(r *wire.SubmitRequest) { r.DependsOnIndex = append(r.DependsOnIndex, idx...) }}
}

// Unique makes the job unique for d from its submission, rounded up to
// whole seconds (1s..720h): while the first job with the same name, queue
// and payload (or UniqueKey) is in one of the counted states (UniqueStates;
// by default waiting, pending, leased, retrying and completed), a
// submission answers that job (Submit's Created false) instead of creating
// another. docs/api.md, "Unique jobs".
func Unique(d time.Duration) Option {
	s := int(ceilSeconds(d))
	return Option{func(r *wire.SubmitRequest) { r.UniqueFor = &s }}
}

// UniqueStates sets the states in which the first job of a Unique
// submission still counts as the same job (StatusPending, ...). Only with
// Unique.
func UniqueStates(states ...string) Option {
	return Option{func(r *wire.SubmitRequest) { r.UniqueStates = append([]string{}, states...) }}
}

// UniqueKey makes key, in place of the payload, the uniqueness key of a
// Unique submission (with the name and queue). At most 200 characters.
// Only with Unique.
func UniqueKey(key string) Option {
	return Option{func(r *wire.SubmitRequest) { r.UniqueKey = key }}
}

func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// Request is one job of SubmitBatch.
type Request struct {
	// Name is the job type, which selects the handler.
	Name string
	// Payload is encoded with encoding/json (a json.RawMessage is sent as
	// it is); nil sends no payload (null).
	Payload any
	// Options are the job's optional settings.
	Options []Option
}

func (r Request) wire() (wire.SubmitRequest, error) {
	w := wire.SubmitRequest{Name: r.Name}
	if r.Payload != nil {
		b, err := json.Marshal(r.Payload)
		if err != nil {
			return w, fmt.Errorf("encode payload of %q: %w", r.Name, err)
		}
		w.Payload = b
	}
	for _, o := range r.Options {
		o.apply(&w)
	}
	return w, nil
}

// Submit creates a job named name (the job type) with payload and answers
// once the job is stored. With IdempotencyKey, a repeat answers the earlier
// job's id and current status; with Unique, so does a repeat while the
// first job holds its claim. SubmitResult tells the two answers apart.
func (c *Client) Submit(ctx context.Context, name string, payload any, opts ...Option) (Submitted, error) {
	out, _, err := c.SubmitResult(ctx, name, payload, opts...)
	return out, err
}

// SubmitResult is Submit that also says whether the job was created (201)
// or is an earlier one that an idempotency key or a unique claim matched
// (200).
func (c *Client) SubmitResult(ctx context.Context, name string, payload any, opts ...Option) (out Submitted, created bool, err error) {
	w, err := Request{Name: name, Payload: payload, Options: opts}.wire()
	if err != nil {
		return out, false, err
	}
	body, err := json.Marshal(w)
	if err != nil {
		return out, false, err
	}
	r := request{method: http.MethodPost, path: "/submit_job", body: body, idempotent: w.IdempotencyKey != ""}
	status, err := c.do(ctx, r, &out)
	return out, status == http.StatusCreated, err
}

// SubmitBatch creates 1 to 1000 jobs in one statement, all or none, and
// answers their ids and statuses in the order of reqs.
func (c *Client) SubmitBatch(ctx context.Context, reqs []Request) ([]Submitted, error) {
	out, err := c.submitBatch(ctx, reqs, nil)
	if err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// SubmitBatchCallback is SubmitBatch with a batch callback: a job created
// waiting on every job of the batch, which runs once all of them are final
// (completed, failed or canceled) with their outcomes in its payload:
// {"payload": <callback.Payload>, "jobs": [{job_id, name, status, result,
// error}, ...]}. The callback takes no DependsOn or DependsOnIndex. It
// answers the batch's jobs in order, then the callback.
func (c *Client) SubmitBatchCallback(ctx context.Context, reqs []Request, callback Request) ([]Submitted, Submitted, error) {
	out, err := c.submitBatch(ctx, reqs, &callback)
	if err != nil {
		return nil, Submitted{}, err
	}
	if out.Callback == nil {
		return nil, Submitted{}, fmt.Errorf("submit batch: the answer has no callback job")
	}
	return out.Jobs, *out.Callback, nil
}

func (c *Client) submitBatch(ctx context.Context, reqs []Request, callback *Request) (*wire.BatchSubmitResponse, error) {
	jobs := make([]json.RawMessage, len(reqs))
	keyed := len(reqs) > 0
	for i, r := range reqs {
		w, err := r.wire()
		if err != nil {
			return nil, fmt.Errorf("jobs[%d]: %w", i, err)
		}
		if jobs[i], err = json.Marshal(w); err != nil {
			return nil, fmt.Errorf("jobs[%d]: %w", i, err)
		}
		keyed = keyed && w.IdempotencyKey != ""
	}
	var body []byte
	var err error
	if callback == nil {
		body, err = json.Marshal(jobs)
	} else {
		var w wire.SubmitRequest
		if w, err = callback.wire(); err != nil {
			return nil, fmt.Errorf("callback: %w", err)
		}
		keyed = keyed && w.IdempotencyKey != ""
		var raw json.RawMessage
		if raw, err = json.Marshal(w); err != nil {
			return nil, fmt.Errorf("callback: %w", err)
		}
		body, err = json.Marshal(wire.BatchSubmitRequest{Jobs: jobs, Callback: raw})
	}
	if err != nil {
		return nil, err
	}
	var out wire.BatchSubmitResponse
	r := request{method: http.MethodPost, path: "/submit_jobs", body: body, idempotent: keyed}
	if _, err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Get returns the job with the decimal id. An unknown id is ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (*Job, error) {
	var j Job
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/jobs/" + url.PathEscape(id), idempotent: true}, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// Timeline returns the job with the decimal id, its attempts and its
// timeline: each lease with its worker and fencing token (never the
// running lease's), failures, backoffs, results rejected as stale and
// operator actions. An unknown id is ErrNotFound.
func (c *Client) Timeline(ctx context.Context, id string) (*JobTimeline, error) {
	var t JobTimeline
	r := request{method: http.MethodGet, path: "/jobs/" + url.PathEscape(id) + "/timeline", idempotent: true}
	if _, err := c.do(ctx, r, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Progress is what a job's handler last reported (worker.Job.Progress).
type Progress struct {
	// Status is the job's status when it was read.
	Status string
	// Percent is 0..100, nil when no handler reported any.
	Percent *int
	// Message is the report's text ("" if none).
	Message string
}

// Progress returns the progress the job's handler last reported, and the
// job's status. A report outlives its attempt: a completed job shows the
// last one. An unknown id is ErrNotFound.
func (c *Client) Progress(ctx context.Context, id string) (Progress, error) {
	j, err := c.Get(ctx, id)
	if err != nil {
		return Progress{}, err
	}
	p := Progress{Status: j.Status, Percent: j.Progress}
	if j.ProgressMessage != nil {
		p.Message = *j.ProgressMessage
	}
	return p, nil
}

// Wait polls the job until it is completed, failed or canceled and returns
// it; check its Status (and Result or LastError). It polls after 50ms, then
// doubles the pause up to Config.PollInterval. It returns early with the
// context's error, or with Get's error once Get's own retries are spent.
func (c *Client) Wait(ctx context.Context, id string) (*Job, error) {
	pause := 50 * time.Millisecond
	for {
		j, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if Terminal(j.Status) {
			return j, nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("wait for job %s (last %s): %w", id, j.Status, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, c.cfg.PollInterval)
	}
}

// ListParams filters and pages List. Zero fields are left out.
type ListParams struct {
	// Status keeps jobs in one status (StatusPending, ...).
	Status string
	// Name keeps jobs of one type.
	Name string
	// Queue keeps jobs of one queue.
	Queue string
	// Limit is the page size, 1..1000 (server default 50). A page may hold
	// fewer jobs when their payloads are large; follow NextCursor.
	Limit int
	// Cursor is the previous page's NextCursor.
	Cursor string
}

// List returns one page of jobs, newest first.
func (c *Client) List(ctx context.Context, p ListParams) (*JobPage, error) {
	q := url.Values{}
	set(q, "status", p.Status)
	set(q, "name", p.Name)
	set(q, "queue", p.Queue)
	set(q, "cursor", p.Cursor)
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var page JobPage
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/jobs", query: q, idempotent: true}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// ListAll yields every job that p selects, newest first, fetching pages of
// p.Limit as it goes. It stops at the first error, which it yields.
func (c *Client) ListAll(ctx context.Context, p ListParams) iter.Seq2[*Job, error] {
	return func(yield func(*Job, error) bool) {
		for {
			page, err := c.List(ctx, p)
			if err != nil {
				yield(nil, err)
				return
			}
			for i := range page.Jobs {
				if !yield(&page.Jobs[i], nil) {
					return
				}
			}
			if page.NextCursor == nil {
				return
			}
			p.Cursor = *page.NextCursor
		}
	}
}

// DLQParams filters and pages DLQ. Zero fields are left out.
type DLQParams struct {
	// Queue keeps failed jobs of one queue.
	Queue string
	// Limit is the page size, 1..1000 (server default 50).
	Limit int
	// Cursor is the previous page's NextCursor (opaque).
	Cursor string
}

// DLQ returns one page of the dead-letter queue: failed jobs, the most
// recently failed first.
func (c *Client) DLQ(ctx context.Context, p DLQParams) (*DLQPage, error) {
	q := url.Values{}
	set(q, "queue", p.Queue)
	set(q, "cursor", p.Cursor)
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var page DLQPage
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/dlq", query: q, idempotent: true}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Cancel cancels a job. A pending or retrying job is canceled at once
// (Status "canceled"); for a running one the cancel is requested
// (CancelRequested, Status "leased") and the job ends canceled when its
// attempt stops. A job already completed, failed or canceled is ErrConflict.
// Needs the admin scope.
func (c *Client) Cancel(ctx context.Context, id string) (Submitted, error) {
	var out Submitted
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/jobs/" + url.PathEscape(id) + "/cancel"}, &out)
	return out, err
}

// Requeue makes a failed job pending again with its attempts reset. A job
// that is not failed is ErrConflict. Needs the admin scope.
func (c *Client) Requeue(ctx context.Context, id string) (Submitted, error) {
	var out Submitted
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/dlq/" + url.PathEscape(id) + "/requeue"}, &out)
	return out, err
}

// RequeueWithPayload makes a failed job pending again, as Requeue does,
// with a new payload: payload is encoded with encoding/json (a
// json.RawMessage is sent as it is; nil is null) and checked by the server
// as a submitted payload is. A payload refused (ErrInvalidField) or a job
// that is not failed (ErrConflict) changes nothing. Needs the admin scope.
func (c *Client) RequeueWithPayload(ctx context.Context, id string, payload any) (Submitted, error) {
	var out Submitted
	p, err := json.Marshal(payload)
	if err != nil {
		return out, fmt.Errorf("encode payload of job %s: %w", id, err)
	}
	body, err := json.Marshal(wire.RequeueRequest{Payload: p})
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, request{method: http.MethodPost, path: "/dlq/" + url.PathEscape(id) + "/requeue", body: body}, &out)
	return out, err
}

// Stats returns the counts of GET /stats.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	var s Stats
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/stats", idempotent: true}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

func set(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}
