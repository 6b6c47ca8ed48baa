package api

// The compatibility routes: the request and answer shapes of the systems
// dts replaces (docs/api.md, "Coming from ..."), so that their clients
// work unchanged.
//
// What must stay true: each route is a thin mapping onto the native path.
// Its body is decoded into wire.SubmitRequest (plus the original's own
// fields, translated) and goes through submitParams and submitOne, so
// validation, limits, the idempotency key, the backlog guard and the
// single insert path are the native ones; reads go through the same
// application calls as GET /jobs/{id} and GET /dlq. Only the answer's shape differs,
// and its types live here rather than in internal/wire because no dts
// client speaks them. Errors keep the native {"error": {...}} shape: none
// of the originals defined one worth copying.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

// maxFailedJobsOffset bounds how deep GET /failedJobs pages: page N is
// found by reading the N-1 pages before it, so deeper entries are left to
// GET /dlq's cursor.
const maxFailedJobsOffset = 10000

// Task statuses of GET /api/tasks/{id}: the vocabulary of the Spring design
// (PENDING → PROCESSING → SUCCESS | FAILED).
const (
	taskPending    = "PENDING"
	taskProcessing = "PROCESSING"
	taskSuccess    = "SUCCESS"
	taskFailed     = "FAILED"
)

// addJobMessage is the message of the original POST /addJob answer.
const addJobMessage = "Job added to queue"

// JobsRequest is the body of POST /jobs: the POST /submit_job body plus
// the fields of the design that named the route. ScheduledAt is RunAt
// under another name; MaxAttempts counts the first attempt, so it is
// MaxRetries + 1.
type JobsRequest struct {
	wire.SubmitRequest
	ScheduledAt *string `json:"scheduled_at,omitempty"`
	MaxAttempts *int    `json:"max_attempts,omitempty"`
}

// TaskCreated answers POST /api/tasks (202). Warnings are POST
// /submit_job's (no worker handles the name), absent when none.
type TaskCreated struct {
	TaskID   string   `json:"task_id"`
	Status   string   `json:"status"`
	Warnings []string `json:"warnings,omitempty"`
}

// Task answers GET /api/tasks/{id}. Status is one of PENDING, PROCESSING,
// SUCCESS and FAILED; JobStatus is the native status, which tells a
// canceled task (FAILED) from a failed one.
type Task struct {
	TaskID     string          `json:"task_id"`
	Type       string          `json:"type"`
	Status     string          `json:"status"`
	JobStatus  string          `json:"job_status"`
	RetryCount int             `json:"retry_count"`
	Payload    json.RawMessage `json:"payload"`
	Result     json.RawMessage `json:"result"`
	Error      *string         `json:"error"`
	CreatedAt  time.Time       `json:"created_at"`
	FinishedAt *time.Time      `json:"finished_at"`
}

// JobAdded answers POST /addJob (200): the original's message, plus the
// job's id and status, which the original did not give, and POST
// /submit_job's warnings (absent when none).
type JobAdded struct {
	Message  string   `json:"message"`
	JobID    string   `json:"job_id"`
	Status   string   `json:"status"`
	Warnings []string `json:"warnings,omitempty"`
}

// FailedJob is one entry of GET /failedJobs: the original's name and error,
// plus the job's id, why it died and when. The payload is left out, so that
// a page stays small whatever the payloads; GET /jobs/{job_id} has it.
type FailedJob struct {
	JobID    string     `json:"job_id"`
	Name     string     `json:"name"`
	Error    string     `json:"error"`
	Reason   string     `json:"reason"`
	Attempts int        `json:"attempts"`
	FailedAt *time.Time `json:"failed_at"`
}

// postJobs handles POST /jobs: POST /submit_job's body and answers, plus
// scheduled_at and max_attempts.
func (h *API) postJobs(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	var req JobsRequest
	if err := decodeObject(body, &req); err != nil {
		return err
	}
	if err := req.translate(); err != nil {
		return err
	}
	p, err := submitParams(&req.SubmitRequest, r.Header.Get("Idempotency-Key"), h.cfg.MaxPayloadBytes)
	if err != nil {
		return err
	}
	return h.answerOne(w, r, p)
}

// translate moves scheduled_at to run_at and max_attempts to max_retries,
// refusing a request that gives a time or a retry count twice.
func (req *JobsRequest) translate() error {
	if req.ScheduledAt != nil {
		if req.RunAt != nil || req.DelaySeconds != nil {
			return httpx.InvalidField("scheduled_at", "give one of scheduled_at, run_at and delay_seconds, not two")
		}
		if _, err := time.Parse(time.RFC3339Nano, *req.ScheduledAt); err != nil {
			return httpx.InvalidField("scheduled_at", "must be an RFC 3339 time such as 2030-01-02T15:04:05Z")
		}
		req.RunAt, req.ScheduledAt = req.ScheduledAt, nil
	}
	if req.MaxAttempts != nil {
		n := *req.MaxAttempts
		if n < 1 || n > maxMaxRetries+1 {
			return httpx.InvalidField("max_attempts", "must be between 1 and %d", maxMaxRetries+1)
		}
		if req.MaxRetries != nil && *req.MaxRetries != n-1 {
			return httpx.InvalidField("max_attempts", "must be max_retries + 1 (%d), or give only one of them", *req.MaxRetries+1)
		}
		retries := n - 1
		req.MaxRetries, req.MaxAttempts = &retries, nil
	}
	return nil
}

// createTask handles POST /api/tasks: {type, payload} (or any /submit_job
// body), answered 202 {"task_id", "status"}, for a new task and for an
// idempotent repeat alike.
func (h *API) createTask(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	var req wire.SubmitRequest
	if err := decodeObject(body, &req); err != nil {
		return err
	}
	if req.Type == "" && req.Name == "" {
		return httpx.InvalidField("type", "required")
	}
	p, err := submitParams(&req, r.Header.Get("Idempotency-Key"), h.cfg.MaxPayloadBytes)
	if err != nil {
		return err
	}
	resp, _, err := h.submitOne(w, r, p)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusAccepted, TaskCreated{TaskID: resp.JobID, Status: taskStatus(job.State(resp.Status)),
		Warnings: resp.Warnings})
	return nil
}

// getTask handles GET /api/tasks/{id}.
func (h *API) getTask(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	j, err := h.app.JobGet(r.Context(), id)
	if err != nil {
		return err
	}
	t := Task{
		TaskID:     j.JobID,
		Type:       j.Name,
		Status:     taskStatus(job.State(j.Status)),
		JobStatus:  j.Status,
		RetryCount: len(j.Errors),
		Payload:    j.Payload, // null when the job has none
		Result:     j.Result,
		Error:      j.LastError,
		CreatedAt:  j.CreatedAt,
		FinishedAt: j.FinishedAt,
	}
	httpx.WriteJSON(w, http.StatusOK, t)
	return nil
}

// taskStatus maps a job state onto the task vocabulary: a job waiting to
// run (again) is PENDING, a canceled one FAILED.
func taskStatus(st job.State) string {
	switch st {
	case job.StatePending, job.StateRetrying:
		return taskPending
	case job.StateLeased:
		return taskProcessing
	case job.StateCompleted:
		return taskSuccess
	default:
		return taskFailed
	}
}

// addJob handles POST /addJob: the /submit_job body, answered 200 as the
// original did, for a new job and for an idempotent repeat alike.
func (h *API) addJob(w http.ResponseWriter, r *http.Request) error {
	p, err := h.decodeSingle(r)
	if err != nil {
		return err
	}
	resp, _, err := h.submitOne(w, r, p)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, JobAdded{Message: addJobMessage, JobID: resp.JobID, Status: resp.Status, Warnings: resp.Warnings})
	return nil
}

// failedJobs handles GET /failedJobs?page=&limit=: a bare JSON array, as
// the original answered, of the page-th group of limit dead jobs, the most
// recently failed first. A Link header (rel="next") points at the next
// page while there is one; past the end the array is empty.
func (h *API) failedJobs(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	page := 1
	if raw := r.URL.Query().Get("page"); raw != "" {
		if page, err = strconv.Atoi(raw); err != nil || page < 1 {
			return httpx.InvalidField("page", "must be an integer of at least 1")
		}
	}
	if page-1 > maxFailedJobsOffset/limit {
		return httpx.InvalidField("page", "starts past the first %d entries; page deeper with GET /dlq and its cursor", maxFailedJobsOffset)
	}
	skip := (page - 1) * limit
	out := make([]FailedJob, 0, limit)
	// Read from the start in pages of GET /dlq, keeping entries skip to
	// skip+limit: each read is bounded like a GET /dlq page, and only the
	// kept entries, without their payloads, are kept.
	cursor, more := "", false
	for read := 0; read < skip+limit; {
		page, err := h.app.DeadList(r.Context(), "", min(skip+limit-read, maxListLimit), cursor)
		if err != nil {
			return err
		}
		for _, d := range page.Jobs {
			if read >= skip {
				out = append(out, FailedJob{
					JobID:    d.Job.JobID,
					Name:     d.Job.Name,
					Error:    deref(d.Job.LastError),
					Reason:   d.Reason,
					Attempts: d.Job.Attempts,
					FailedAt: d.Job.FinishedAt,
				})
			}
			read++
		}
		more = page.NextCursor != nil
		if !more || len(page.Jobs) == 0 {
			break
		}
		cursor = *page.NextCursor
	}
	if more {
		q := url.Values{"page": {strconv.Itoa(page + 1)}, "limit": {strconv.Itoa(limit)}}
		w.Header().Set("Link", fmt.Sprintf(`<%s?%s>; rel="next"`, r.URL.Path, q.Encode()))
	}
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
