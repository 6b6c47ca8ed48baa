package wire

import (
	"encoding/json"
	"time"
)

// This file holds the submitter's HTTP API bodies (docs/api.md describes the
// routes). Job ids travel as decimal strings: they are PostgreSQL bigints,
// and JavaScript clients lose precision on numbers above 2^53.

// SubmitRequest is one job to create: the body of POST /submit_job and
// POST /jobs, and one element of POST /submit_jobs. Optional fields are
// pointers so that an absent field (default) differs from a zero one.
type SubmitRequest struct {
	// Name is the job type that selects the worker handler: 1..128
	// characters, no control characters.
	Name string `json:"name"`
	// Type is accepted for Name on POST /jobs (and in batches); if both are
	// given they must be equal.
	Type string `json:"type,omitempty"`
	// Payload is any JSON value (a string, an object, ...); absent means null.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Queue defaults to "default": 1..64 characters of [A-Za-z0-9_.:-].
	Queue string `json:"queue,omitempty"`
	// Priority is -1000..1000, default 0; higher runs first.
	Priority *int `json:"priority,omitempty"`
	// MaxRetries is 0..100, default 3 (so 4 attempts in all).
	MaxRetries *int `json:"max_retries,omitempty"`
	// RunAt (RFC 3339) delays the first attempt until then. Not with DelaySeconds.
	RunAt *string `json:"run_at,omitempty"`
	// DelaySeconds (0..31,536,000) delays the first attempt. Not with RunAt.
	DelaySeconds *int64 `json:"delay_seconds,omitempty"`
	// TimeoutSeconds bounds one attempt: 0..86,400, 0 (default) for none.
	TimeoutSeconds *int `json:"timeout_seconds,omitempty"`
	// IdempotencyKey (at most 200 characters) makes a resubmission return
	// the first job instead of creating another. Also the Idempotency-Key header.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// DependsOn names existing jobs (ids as strings or numbers) that must
	// all complete before this one runs; until then it is waiting. When
	// one fails for good or is canceled, this job is canceled. Unknown ids
	// are a 400 unknown_dependency. At most 1000.
	DependsOn []json.RawMessage `json:"depends_on,omitempty"`
	// DependsOnIndex, in a batch only, names earlier jobs of the same
	// batch by their index (each below the job's own), like DependsOn.
	DependsOnIndex []int `json:"depends_on_index,omitempty"`
	// UniqueFor (1..2,592,000 seconds, 30 days) makes the job unique for
	// that long from its submission: a submission of the same name, queue
	// and payload (or UniqueKey) answers 200 with this job while it is in
	// one of UniqueStates. Absent: not unique.
	UniqueFor *int `json:"unique_for,omitempty"`
	// UniqueStates are the states in which the job still counts as the
	// same one; default waiting, pending, leased, retrying and completed
	// (so a failed or canceled job frees the key). Only with UniqueFor.
	UniqueStates []string `json:"unique_states,omitempty"`
	// UniqueKey (at most 200 characters) replaces the payload in the
	// uniqueness key, which stays scoped by name and queue. Only with
	// UniqueFor.
	UniqueKey string `json:"unique_key,omitempty"`
	// ConcurrencyKey (1..200 characters, no control characters) puts the
	// job under the limit of that key (PUT /limits/{key}): set now or
	// later. Without it, a job is under its name's limit ("name:<name>")
	// if one exists when it is submitted.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
}

// BatchSubmitRequest is the object form of the POST /submit_jobs body; a
// bare JSON array of SubmitRequest is accepted too.
type BatchSubmitRequest struct {
	Jobs []json.RawMessage `json:"jobs"`
	// Callback is a job (a SubmitRequest without depends_on or
	// depends_on_index) created waiting on every job of the batch; it runs
	// once all of them are final, whatever their outcome, with the payload
	// {"payload": <its own>, "jobs": [{job_id, name, status, result,
	// error}, ...]} in batch order.
	Callback json.RawMessage `json:"callback,omitempty"`
}

// SubmitResponse answers a submission (201 created, 200 for a repeated
// idempotency key or a unique job's repeat) and a state change (cancel, requeue).
type SubmitResponse struct {
	JobID           string `json:"job_id"`
	Status          string `json:"status"`
	CancelRequested bool   `json:"cancel_requested,omitempty"`
	// Warnings say what the submission may not do as meant though it was
	// accepted: no worker handles the job's name (a typo, or a worker not
	// started yet). Absent when none.
	Warnings []string `json:"warnings,omitempty"`
}

// BatchSubmitResponse answers POST /submit_jobs, in request order.
type BatchSubmitResponse struct {
	Jobs     []SubmitResponse `json:"jobs"`
	Callback *SubmitResponse  `json:"callback,omitempty"` // the batch's callback job, if one was asked for
}

// Job is a job as GET /jobs/{id} and GET /jobs show it. Times are RFC 3339
// in UTC; optional ones are null when unset.
type Job struct {
	JobID           string          `json:"job_id"`
	Name            string          `json:"name"`
	Queue           string          `json:"queue"`
	Priority        int             `json:"priority"`
	Payload         json.RawMessage `json:"payload"`
	Status          string          `json:"status"`
	Attempts        int             `json:"attempts"`
	MaxRetries      int             `json:"max_retries"`
	TimeoutSeconds  int             `json:"timeout_seconds"`
	LastError       *string         `json:"last_error"`
	Errors          []AttemptError  `json:"errors"`
	Result          json.RawMessage `json:"result"`
	WorkerID        *string         `json:"worker_id"`
	CreatedAt       time.Time       `json:"created_at"`
	StartedAt       *time.Time      `json:"started_at"`
	FinishedAt      *time.Time      `json:"finished_at"`
	NextRunAt       *time.Time      `json:"next_run_at"`
	CancelRequested bool            `json:"cancel_requested"`
	// Progress (0..100) and ProgressMessage are the latest a handler
	// reported (worker.Job.Progress); null when none did.
	Progress        *int    `json:"progress"`
	ProgressMessage *string `json:"progress_message"`
	// LimitKey is the key of the limit the job is under: its
	// concurrency_key, or "name:<name>" when its name had a limit when it
	// was submitted. Left out when it is under none.
	LimitKey string `json:"limit_key,omitempty"`
	// TraceID is the id (32 hex digits) of the trace the job continues,
	// from the traceparent it was submitted with; omitted: none.
	TraceID string `json:"trace_id,omitempty"`
}

// AttemptError is the error one failed attempt left behind. The fields
// after At are recorded since migration 014 and left out of older entries.
type AttemptError struct {
	Attempt  int       `json:"attempt"`
	Error    string    `json:"error"`
	Reason   string    `json:"reason"`
	WorkerID string    `json:"worker_id,omitempty"`
	At       time.Time `json:"at"` // when the attempt ended
	// LeaseToken is the attempt's lease's fencing token, in decimal (63
	// bits: more than a JavaScript number holds exactly).
	LeaseToken      string     `json:"lease_token,omitempty"`
	StartedAt       *time.Time `json:"started_at,omitempty"`
	LeaseExtensions int        `json:"lease_extensions,omitempty"`
	// NextState is the state the failure led to: retrying, failed or
	// canceled; RetryAt, when retrying, the end of its backoff.
	NextState string     `json:"next_state,omitempty"`
	RetryAt   *time.Time `json:"retry_at,omitempty"`
}

// JobTimeline answers GET /jobs/{id}/timeline: every field of the job
// (those of GET /jobs/{id} and the rest of its row), its attempts and its
// timeline, oldest first (docs/api.md).
type JobTimeline struct {
	Job
	IdempotencyKey *string    `json:"idempotency_key"`
	DeadReason     *string    `json:"dead_reason"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	// LeaseExtensions counts the heartbeat extensions of the current
	// lease, or of the last one.
	LeaseExtensions int             `json:"lease_extensions"`
	Attempts        []Attempt       `json:"attempts"`
	Timeline        []TimelineEntry `json:"timeline"`
}

// Attempt is one attempt of a job: each that failed, was reclaimed or
// handed back, and the current or last one.
type Attempt struct {
	Attempt  int    `json:"attempt"`
	WorkerID string `json:"worker_id,omitempty"`
	// LeaseToken is the lease's fencing token in decimal; left out when
	// unknown (an entry older than migration 014) and while the lease
	// runs (Running): a result needs it to be applied.
	LeaseToken string     `json:"lease_token,omitempty"`
	Running    bool       `json:"running,omitempty"`
	StartedAt  *time.Time `json:"started_at"`
	EndedAt    *time.Time `json:"ended_at"`
	// DurationMS is EndedAt − StartedAt; null unless both are known.
	DurationMS      *int64     `json:"duration_ms"`
	LeaseExtensions int        `json:"lease_extensions"`
	LeaseExpiresAt  *time.Time `json:"lease_expires_at,omitempty"` // Running only
	// Outcome is running, completed, released, or the failure's reason.
	Outcome   string     `json:"outcome"`
	Error     string     `json:"error,omitempty"`
	NextState string     `json:"next_state,omitempty"`
	RetryAt   *time.Time `json:"retry_at,omitempty"`
}

// TimelineEntry is one line of a job's timeline. Kind is submitted,
// leased, completed, failed, released, backoff, dead, canceled,
// stale_result or operator; which other fields are set depends on it
// (docs/api.md).
type TimelineEntry struct {
	At              time.Time  `json:"at"`
	Kind            string     `json:"kind"`
	Attempt         int        `json:"attempt,omitempty"`
	WorkerID        string     `json:"worker_id,omitempty"`
	LeaseToken      string     `json:"lease_token,omitempty"`
	Running         bool       `json:"running,omitempty"`
	Until           *time.Time `json:"until,omitempty"`
	LeaseExtensions int        `json:"lease_extensions,omitempty"`
	Reason          string     `json:"reason,omitempty"`
	Error           string     `json:"error,omitempty"`
	Outcome         string     `json:"outcome,omitempty"`
	OfAttempt       int        `json:"of_attempt,omitempty"`
	Action          string     `json:"action,omitempty"`
	Actor           string     `json:"actor,omitempty"`
	Result          string     `json:"result,omitempty"`
}

// JobListResponse answers GET /jobs. NextCursor is null on the last page.
type JobListResponse struct {
	Jobs       []Job   `json:"jobs"`
	NextCursor *string `json:"next_cursor"`
}

// DLQJob is a job in the dead-letter queue: the job and why it died.
type DLQJob struct {
	Job
	Reason string `json:"reason"`
	// Fingerprint is its error's first line with what varies (numbers,
	// ids, quoted text, durations, addresses) replaced by placeholders:
	// the dead jobs of one name with one fingerprint are a group, which
	// POST /jobs/bulk selects with "name" and "fingerprint". "" for a job
	// made dead outside the scheduler.
	Fingerprint string `json:"fingerprint"`
}

// RequeueRequest is the optional body of POST /dlq/{id}/requeue.
type RequeueRequest struct {
	// Payload, when present (null included), replaces the job's payload;
	// it is checked as a submitted payload is. Absent: the job keeps its
	// payload.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// DLQResponse answers GET /dlq, the most recently failed first.
// NextCursor is null on the last page.
type DLQResponse struct {
	Jobs       []DLQJob `json:"jobs"`
	NextCursor *string  `json:"next_cursor"`
}

// StatsResponse answers GET /stats.
type StatsResponse struct {
	Jobs                 map[string]int64 `json:"jobs"`        // every job state, zeros included
	QueueDepth           int64            `json:"queue_depth"` // pending or retrying and due now
	DLQDepth             int64            `json:"dlq_depth"`   // failed jobs
	OldestPendingSeconds float64          `json:"oldest_pending_seconds"`
	// OldestHandledPendingSeconds is OldestPendingSeconds among the names a
	// live worker handles: jobs of UnknownNames do not drive it.
	OldestHandledPendingSeconds float64          `json:"oldest_handled_pending_seconds"`
	Workers                     map[string]int64 `json:"workers"` // available, busy, unavailable, draining
	// UnknownNames counts pending and retrying jobs by name, for the names
	// no live (available or busy) worker handles: the 100 largest;
	// UnknownNamesOther sums the rest. Empty when every name is handled.
	UnknownNames      map[string]int64 `json:"unknown_names"`
	UnknownNamesOther int64            `json:"unknown_names_other"`
	// StarvedNames maps each job name whose oldest due job has waited more
	// than 30 s although a worker that handles the name has a free slot to
	// that wait in seconds: dispatch is not serving it. Empty normally.
	StarvedNames map[string]float64 `json:"starved_names"`
}

// StatusResponse answers GET /healthz and a successful GET /readyz.
type StatusResponse struct {
	Status string `json:"status"`
}

// ErrorResponse is the body of every 4xx and 5xx answer.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is an error's stable Code (for programs) and Message (for people).
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes. They are part of the API: never rename one.
const (
	CodeInvalidJSON          = "invalid_json"           // 400: the body is not one JSON value of the expected shape
	CodeBodyTooLarge         = "body_too_large"         // 413: the body is over the route's limit
	CodeInvalidField         = "invalid_field"          // 400: a field or query parameter is invalid; the message names it
	CodeInvalidID            = "invalid_id"             // 400: a path id is not a positive 64-bit integer
	CodeNotFound             = "not_found"              // 404: no such job
	CodeConflict             = "conflict"               // 409: the job's state does not allow the operation
	CodeMethodNotAllowed     = "method_not_allowed"     // 405
	CodeRouteNotFound        = "route_not_found"        // 404: no such route
	CodeUnsupportedMediaType = "unsupported_media_type" // 415: reserved; the submitter ignores Content-Type
	CodeNotReady             = "not_ready"              // 503 from /readyz: a dependency is down or the server is stopping
	CodeUnavailable          = "unavailable"            // 503: a dependency timed out
	CodeBacklogFull          = "backlog_full"           // 503: more due jobs wait than the submitter's MAX_BACKLOG; see Retry-After
	CodeCanceled             = "canceled"               // 499: the client went away first (logs and metrics only)
	CodeStoreUnavailable     = "store_unavailable"      // 503: PostgreSQL cannot be reached; see Retry-After
	CodeInternal             = "internal"               // 500: details are in the server log only
	CodeUnauthorized         = "unauthorized"           // 401: missing, malformed, badly signed, expired, revoked or unknown token
	CodeForbidden            = "forbidden"              // 403: the token lacks the route's scope
	CodeRateLimited          = "rate_limited"           // 429: over the caller's rate; see Retry-After
	CodeOverloaded           = "overloaded"             // 503: too many requests in progress; retry shortly
	CodeNotLeader            = "not_leader"             // 503 from a standby coordinator's /workers: ask the leader
	CodeUnknownDependency    = "unknown_dependency"     // 400: depends_on names jobs that do not exist; the message lists them
	CodeUnknownJobName       = "unknown_job_name"       // 400 with REJECT_UNKNOWN_JOB_NAMES: no worker handles the name; the message lists those handled
	CodeInvalidUnique        = "invalid_unique"         // 400: unique_for, unique_states or unique_key is invalid; the message names the field
	CodeInvalidLimit         = "invalid_limit"          // 400: a limit's key, concurrency, rate or period_seconds is invalid; the message names it
)
