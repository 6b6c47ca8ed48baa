package wire

import (
	"encoding/json"
	"time"
)

// This file holds the bodies of the submitter's admin routes (API keys, the
// audit log, bulk job actions) and of its worker listing. The submitter
// and the Go client share them, so that a field means the same on both
// sides.

// TokenRequest is the body of POST /admin/tokens.
type TokenRequest struct {
	// Name says what the key is for: 1..128 characters, no control characters.
	Name string `json:"name"`
	// Scopes are one or more of submit, read, admin.
	Scopes []string `json:"scopes"`
	// TTL is how long the key lives, as a Go duration ("720h"). Absent: the
	// submitter's DefaultTokenTTL; "0": it never expires.
	TTL *string `json:"ttl,omitempty"`
}

// Token is an API key as the API shows it: never the key, never its hash.
type Token struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scopes     []string   `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// TokenCreated answers POST /admin/tokens: the new key's facts and, this
// once, the key itself. Nothing can show it again.
type TokenCreated struct {
	Token
	Key string `json:"key"`
}

// TokenListResponse answers GET /admin/tokens, newest first.
type TokenListResponse struct {
	Tokens []Token `json:"tokens"`
}

// AuditEntry is one audit log row as GET /admin/audit shows it.
type AuditEntry struct {
	ID         string          `json:"id"`
	At         time.Time       `json:"at"`
	Actor      string          `json:"actor"`
	Action     string          `json:"action"`
	TargetType string          `json:"target_type"`
	TargetID   string          `json:"target_id"`
	Details    json.RawMessage `json:"details"`
}

// AuditListResponse answers GET /admin/audit, newest first. NextCursor is
// null on the last page.
type AuditListResponse struct {
	Entries    []AuditEntry `json:"entries"`
	NextCursor *string      `json:"next_cursor"`
}

// StatusDeleted is the status DELETE /jobs/{id} answers: the job is gone.
const StatusDeleted = "deleted"

// Bulk actions of POST /jobs/bulk.
const (
	BulkCancel  = "cancel"  // waiting, pending, retrying and leased jobs, as POST /jobs/{id}/cancel
	BulkRequeue = "requeue" // failed jobs, as POST /dlq/{id}/requeue
	BulkDelete  = "delete"  // completed, failed and canceled jobs, as DELETE /jobs/{id}
)

// BulkRequest is the body of POST /jobs/bulk: an action on every job the
// filters (those of GET /jobs) select among the states the action applies
// to.
type BulkRequest struct {
	// Action is BulkCancel, BulkRequeue or BulkDelete.
	Action string `json:"action"`
	// Status keeps jobs in one state; it must be one the action applies to.
	// Empty: every state the action applies to.
	Status string `json:"status,omitempty"`
	// Name keeps jobs of one type. Empty: any.
	Name string `json:"name,omitempty"`
	// Queue keeps jobs of one queue. Empty: any.
	Queue string `json:"queue,omitempty"`
	// Fingerprint keeps the dead jobs whose error has this fingerprint
	// (GET /dlq's "fingerprint"): with Name, which it needs, one
	// dead-letter group. Only dead jobs have one, so it goes with requeue
	// and delete, and, like Queue, only in the background. Empty: any.
	Fingerprint string `json:"fingerprint,omitempty"`
	// DryRun counts the jobs selected and changes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Background runs the action as an operation (GET /operations/{id}):
	// the answer (202) carries its id at once, and the jobs change a batch
	// of at most 1000 per transaction, with visible progress, until it ends
	// or is canceled.
	Background bool `json:"background,omitempty"`
}

// BulkResponse answers POST /jobs/bulk. Matched is how many jobs the
// filters selected (a dry run stops there); Affected how many the action
// changed (a job whose state changed meanwhile is skipped).
type BulkResponse struct {
	Action   string `json:"action"`
	DryRun   bool   `json:"dry_run"`
	Matched  int64  `json:"matched"`
	Affected int64  `json:"affected"`
	// Background and OperationID: the request asked for a background
	// operation, and its id ("" when no job matched: nothing runs).
	Background  bool   `json:"background,omitempty"`
	OperationID string `json:"operation_id,omitempty"`
}

// Worker is a worker as GET /workers shows it: the leader coordinator's
// view, as it last wrote it to PostgreSQL.
type Worker struct {
	WorkerID        string     `json:"worker_id"`
	State           string     `json:"state"` // available, busy, draining, unavailable
	JobTypes        []string   `json:"job_types"`
	Concurrency     int        `json:"concurrency"`
	InFlight        int        `json:"in_flight"`
	LastHeartbeatAt time.Time  `json:"last_heartbeat_at"`
	LastAssignedAt  *time.Time `json:"last_assigned_at"`
	Host            string     `json:"host"`    // as its heartbeats say; "" when they do not
	Version         string     `json:"version"` // its build, as its heartbeats say
	// DrainRequestedAt is when an operator asked that it get no new jobs
	// (POST /workers/{id}/drain), by DrainRequestedBy; null: never.
	DrainRequestedAt *time.Time `json:"drain_requested_at"`
	DrainRequestedBy string     `json:"drain_requested_by,omitempty"`
	// LeasedJobs are the ids of the jobs it holds leased, as PostgreSQL
	// records them.
	LeasedJobs []string `json:"leased_jobs"`
}

// WorkerListResponse answers GET /workers, by worker id.
type WorkerListResponse struct {
	Workers []Worker `json:"workers"`
}
