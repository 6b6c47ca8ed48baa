package wire

import "time"

// Operation states.
const (
	OperationRunning  = "running"
	OperationDone     = "done"
	OperationCanceled = "canceled"
	OperationFailed   = "failed"
)

// Operation is a background bulk action (POST /jobs/bulk with background)
// as GET /operations/{id} shows it. Processed counts the jobs visited so
// far, Affected those the action changed (a job whose state changed since
// it was counted is skipped); both only grow, a batch at a time.
type Operation struct {
	OperationID string     `json:"operation_id"`
	Action      string     `json:"action"`                // cancel, requeue, delete
	Statuses    []string   `json:"statuses"`              // the states it applies to
	Name        string     `json:"name,omitempty"`        // the name filter
	Queue       string     `json:"queue,omitempty"`       // the queue filter
	Fingerprint string     `json:"fingerprint,omitempty"` // the error fingerprint filter
	State       string     `json:"state"`                 // running, done, canceled, failed
	Matched     int64      `json:"matched"`               // jobs the filter selected at the start
	Processed   int64      `json:"processed"`             // jobs visited
	Affected    int64      `json:"affected"`              // jobs changed
	Actor       string     `json:"actor"`                 // who started it
	CanceledBy  string     `json:"canceled_by,omitempty"`
	Error       string     `json:"error,omitempty"` // why it failed
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	FinishedAt  *time.Time `json:"finished_at"`
}

// OperationListResponse answers GET /operations: the newest first.
type OperationListResponse struct {
	Operations []Operation `json:"operations"`
}

// ScheduledJobsResponse answers GET /jobs/scheduled: pending and retrying
// jobs whose run time is ahead, soonest first.
type ScheduledJobsResponse struct {
	Jobs       []Job   `json:"jobs"`
	NextCursor *string `json:"next_cursor"`
}
