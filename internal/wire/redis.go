// Package wire defines what crosses process boundaries: the messages that
// travel through Redis between coordinator and workers, and the HTTP request
// and response bodies of the submitter API. It imports only the standard
// library; every field is JSON with snake_case names.
package wire

import (
	"encoding/json"
	"time"
)

// Delivery is a leased job sent by the coordinator to one worker's list.
type Delivery struct {
	JobID          int64           `json:"job_id"`
	Name           string          `json:"name"`
	Queue          string          `json:"queue,omitempty"`
	Payload        json.RawMessage `json:"payload"`
	Attempt        int             `json:"attempt"`
	MaxRetries     int             `json:"max_retries"`
	TimeoutSeconds int             `json:"timeout_seconds,omitempty"`
	LeaseToken     int64           `json:"lease_token"`
	CreatedAt      time.Time       `json:"created_at"`
	// TraceParent is the W3C trace context the attempt continues (the
	// submit request's trace, through the leader's delivery span); empty:
	// the job has no trace.
	TraceParent string `json:"traceparent,omitempty"`
}

// ProtocolVersion is the version of the worker protocol (docs/protocol.md)
// this code speaks, and what a worker announces in Heartbeat.Protocol. It
// changes only for a change an older peer would misread; additions it can
// ignore (an optional field, a codec announced in Heartbeat.Codec) keep it.
const ProtocolVersion = 1

// MinProtocolVersion is the oldest protocol version a coordinator still
// serves. A worker that announces a version outside MinProtocolVersion ..
// ProtocolVersion is registered, but the coordinator sends it no jobs.
const MinProtocolVersion = 1

// ProtocolSupported reports whether a coordinator of this build serves a
// worker that announces protocol version v (0: a worker that does not say,
// which speaks version 1).
func ProtocolSupported(v int) bool {
	if v == 0 {
		v = 1
	}
	return v >= MinProtocolVersion && v <= ProtocolVersion
}

// Control is a command to a worker, sent on its control list.
type Control struct {
	Op         string `json:"op"` // "cancel"
	JobID      int64  `json:"job_id"`
	LeaseToken int64  `json:"lease_token"`
	Reason     string `json:"reason,omitempty"`
}

// Control ops.
const (
	OpCancel = "cancel"
)

// Result outcomes reported by workers.
const (
	OutcomeCompleted = "completed" // the handler succeeded
	OutcomeFailed    = "failed"    // the handler failed; retry if retries remain
	OutcomeReleased  = "released"  // the worker gave the job back unrun or interrupted (shutdown); the attempt does not count
	// OutcomeProgress is not an outcome: a running attempt's progress
	// report (Progress, Message). It ends nothing and frees no slot.
	OutcomeProgress = "progress"
)

// Bounds of a progress report.
const (
	MaxProgress        = 100
	MaxProgressMessage = 200 // characters
)

// Result is what a worker reports on the results stream after an attempt.
type Result struct {
	JobID      int64           `json:"job_id"`
	LeaseToken int64           `json:"lease_token"`
	WorkerID   string          `json:"worker_id"`
	Attempt    int             `json:"attempt"`
	Outcome    string          `json:"outcome"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      string          `json:"error,omitempty"`
	Reason     string          `json:"reason,omitempty"`   // error, permanent, timeout, canceled
	Progress   int             `json:"progress,omitempty"` // outcome progress: 0..MaxProgress
	Message    string          `json:"message,omitempty"`  // outcome progress: at most MaxProgressMessage characters
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt time.Time       `json:"finished_at"`
	// Logs are the lines the handler logged since the attempt's previous
	// report (logs.go); nil: none.
	Logs *Logs `json:"logs,omitempty"`
}

// InFlight names one job a worker holds, for lease extension, and says
// whether its handler has started: a job's time limit (timeout_seconds)
// counts from its handler's start, and a prefetched job may wait long for
// a slot first. A heartbeat of an older worker says neither, and its
// jobs' time limits count from their leases' start.
type InFlight struct {
	JobID      int64 `json:"job_id"`
	LeaseToken int64 `json:"lease_token"`
	// Waiting: its handler has not started (it waits for a slot, or its
	// result, that it never ran, is not sent yet).
	Waiting bool `json:"waiting,omitempty"`
	// Started: its handler started RunMillis milliseconds before the
	// heartbeat was sent, by the worker's clock.
	Started   bool  `json:"started,omitempty"`
	RunMillis int64 `json:"run_ms,omitempty"`
}

// Heartbeat is sent by every worker on the heartbeat stream every interval.
// The first one registers the worker; each one carries its full description,
// so a coordinator that just became leader knows the fleet after one interval.
type Heartbeat struct {
	WorkerID string   `json:"worker_id"`
	JobTypes []string `json:"job_types"` // "*" means any name
	// Queues are the queues the worker serves and their weights
	// (WORKER_QUEUES); none: every queue, by priority alone.
	Queues      []QueueWeight `json:"queues,omitempty"`
	Concurrency int           `json:"concurrency"`
	// Prefetch is how many jobs beyond Concurrency it takes, each waiting
	// for a free slot (WORKER_PREFETCH); 0 or omitted: none.
	Prefetch   int        `json:"prefetch,omitempty"`
	InFlight   []InFlight `json:"in_flight"`
	Draining   bool       `json:"draining,omitempty"` // shutting down: send no more jobs
	Stopped    bool       `json:"stopped,omitempty"`  // the last heartbeat: the worker has exited
	Credential string     `json:"credential,omitempty"`
	// Codec is the newest codec of deliveries the worker reads (codec.go):
	// CodecJSON (0, omitted), CodecBinary, CodecBatch, CodecLogs or
	// CodecTrace.
	Codec int `json:"codec,omitempty"`
	// Protocol is the worker protocol version the worker speaks
	// (ProtocolVersion); 0 or omitted means 1.
	Protocol int       `json:"protocol,omitempty"`
	SentAt   time.Time `json:"sent_at"`           // informational only; ages use the receiver's clock
	Host     string    `json:"host,omitempty"`    // the worker's host name, for operators
	Version  string    `json:"version,omitempty"` // the worker's build, for operators
}

// QueueWeight is one queue a worker serves and its weight: when every
// queue the worker serves has due jobs, each gets a share of its slots in
// proportion to its weight. A weight of 0 takes only slots the others
// leave.
type QueueWeight struct {
	Name   string `json:"name"`
	Weight int    `json:"weight"`
}

// DeadEntry is one dead-letter list entry: which job died, why, and its
// last error (cut to 512 characters). The coordinator writes ids and
// metadata only, never the payload or the error history, so that the
// mirror's size does not grow with what jobs carry; GET /dlq and GET
// /jobs/{id} have everything. Payload and Errors stay in the type for
// readers of entries written by older versions.
type DeadEntry struct {
	JobID       int64           `json:"job_id"`
	OriginalJob DeadJob         `json:"original_job"`
	Reason      string          `json:"reason"`
	Errors      json.RawMessage `json:"errors,omitempty"`
	FailedAt    time.Time       `json:"failed_at"`
}

// DeadJob is the job part of a DeadEntry.
type DeadJob struct {
	JobID      int64           `json:"job_id"`
	Name       string          `json:"name"`
	Queue      string          `json:"queue"`
	Payload    json.RawMessage `json:"payload,omitempty"`
	Attempts   int             `json:"attempts"`
	MaxRetries int             `json:"max_retries"`
	LastError  string          `json:"error"`
	CreatedAt  time.Time       `json:"created_at"`
}
