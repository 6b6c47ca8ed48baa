// Package job holds the scheduler's domain types: a Job, its State and the
// transitions allowed between states, and the sentinel errors every layer
// shares. It imports only the standard library so that every module (the
// worker SDK included) can use it without pulling in database drivers.
//
// The state machine (docs/architecture.md draws it):
//
//	waiting  -> pending                (every parent completed; a batch callback:
//	                                    every parent final)
//	waiting  -> canceled               (a parent failed or was canceled; cancel)
//	pending  -> leased                 (coordinator claims it for a worker)
//	retrying -> leased                 (its next_run_at has come)
//	leased   -> completed              (the worker reported success)
//	leased   -> retrying               (an attempt failed, a lease expired or
//	                                    its worker died, retries remain)
//	leased   -> failed                 (retries exhausted or a permanent error; in the DLQ)
//	leased   -> pending                (the worker handed it back on shutdown; the attempt does not count)
//	leased   -> canceled               (cancel requested and the attempt stopped)
//	pending, retrying -> canceled      (cancel)
//	failed   -> pending                (requeued from the DLQ with attempts reset)
//
// Every transition is applied by one guarded UPDATE whose WHERE names the
// expected state (and, for leased jobs, the lease token).
package job

import (
	"encoding/json"
	"errors"
	"time"
)

// State is a job's lifecycle state as stored in PostgreSQL.
type State string

// The job states.
const (
	StateWaiting   State = "waiting" // parents not done yet; in no claim index
	StatePending   State = "pending"
	StateLeased    State = "leased"
	StateRetrying  State = "retrying"
	StateCompleted State = "completed"
	StateFailed    State = "failed"
	StateCanceled  State = "canceled"
)

// States lists every state, in lifecycle order.
var States = []State{StateWaiting, StatePending, StateLeased, StateRetrying, StateCompleted, StateFailed, StateCanceled}

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Final reports whether no further transition happens on its own from s.
func (s State) Final() bool {
	return s == StateCompleted || s == StateFailed || s == StateCanceled
}

// Sentinel errors shared by the store, the queue and the HTTP layers.
var (
	ErrNotFound  = errors.New("not found")
	ErrConflict  = errors.New("conflict")
	ErrLeaseLost = errors.New("lease lost")
	// ErrRefused says PostgreSQL answered a statement with an ERROR: the
	// statement was rolled back and wrote nothing (unlike a lost
	// connection or a FATAL, after which a commit may or may not have
	// happened).
	ErrRefused = errors.New("refused by the database")
	// ErrBadData says PostgreSQL refused a statement (ErrRefused) for a
	// value it carried: a data exception (SQLSTATE class 22), an integrity
	// constraint (23), a program limit (54) or a trigger's RAISE
	// EXCEPTION (P0). The same values are refused again whenever they are
	// sent; a caller holding several rows finds the bad one by sending
	// them one by one. Any other refusal (a lock or statement timeout, a
	// cancel, a deadlock, a serialization failure, a lack of disk, memory
	// or connections, a shutdown) says nothing about the data: the same
	// statement can succeed later.
	ErrBadData = errors.New("data refused by the database")
	// ErrDeposed says a leader's write was refused because another
	// coordinator has taken over (its epoch is no longer current): nothing
	// was written, and the caller must stop acting as leader.
	ErrDeposed = errors.New("leader deposed: epoch superseded")
	// ErrStoreUnavailable says PostgreSQL could not be reached or ended
	// the session (connection refused or cut, shutting down, starting
	// up). Whether a statement that was in flight committed is unknown;
	// one that never reached the server wrote nothing.
	ErrStoreUnavailable = errors.New("database unavailable")
)

// Job is one unit of work and everything PostgreSQL knows about it.
type Job struct {
	ID             int64
	Name           string
	Queue          string
	Priority       int
	Payload        json.RawMessage
	State          State
	Attempts       int
	MaxRetries     int
	TimeoutSeconds int
	IdempotencyKey string
	LastError      string
	Errors         []AttemptError
	Result         json.RawMessage
	WorkerID       string
	LeaseToken     int64
	CancelRequest  bool
	CreatedAt      time.Time
	StartedAt      *time.Time
	FinishedAt     *time.Time
	NextRunAt      time.Time
	// Progress (0..100) and ProgressMessage are the latest a handler
	// reported; Progress is nil when none did.
	Progress        *int
	ProgressMessage string
	// LimitKey is the key of the limit the job is under (its concurrency
	// key, or "name:<name>"), decided when it was submitted; "" for none.
	LimitKey string
	// DeadReason says why a failed (dead) or dependency-canceled job
	// ended (ReasonPermanent, ReasonMaxRetriesExceeded, ...); "" otherwise.
	DeadReason string
	// LeaseExpiresAt is the deadline of the current lease; nil unless
	// leased.
	LeaseExpiresAt *time.Time
	// LeaseExtensions counts the extensions of the current lease, or of
	// the last one once it ended (every claim resets it).
	LeaseExtensions int
	// LastLeaseToken is the token of the last lease that ended (completed,
	// failed or handed back); 0 when none did since it was recorded
	// (migration 014).
	LastLeaseToken int64
	// TraceParent is the W3C trace context the job continues (migration
	// 018); "" when it has none.
	TraceParent string
}

// AttemptError is what one ended attempt left behind in the job's errors:
// every failure, reclaim and death appends one (a success or a hand-back
// does not). The fields after At were added later (migration 014): older
// entries lack them, and they read as zero (unknown).
type AttemptError struct {
	Attempt  int       `json:"attempt"`
	Error    string    `json:"error"`
	Reason   string    `json:"reason"`
	WorkerID string    `json:"worker_id,omitempty"`
	At       time.Time `json:"at"` // when the attempt ended
	// LeaseToken is the attempt's lease's fencing token.
	LeaseToken int64 `json:"token,omitempty"`
	// StartedAt is when the attempt started (its handler's start as the
	// worker reported it, else the lease time).
	StartedAt *time.Time `json:"started,omitempty"`
	// Extensions counts the heartbeat extensions of its lease.
	Extensions int `json:"extended,omitempty"`
	// NextState is the state the failure led to: retrying, failed (dead)
	// or canceled.
	NextState State `json:"next_state,omitempty"`
	// RetryAt is the end of the backoff, when NextState is retrying.
	RetryAt *time.Time `json:"retry_at,omitempty"`
}

// Reasons an attempt ended without success; they label metrics and DLQ entries.
const (
	ReasonError              = "error"                // the handler returned an error
	ReasonPermanent          = "permanent"            // the handler returned a permanent error
	ReasonTimeout            = "timeout"              // the job ran past its timeout_seconds
	ReasonWorkerFailure      = "worker_failure"       // its worker stopped heartbeating
	ReasonLeaseTimeout       = "lease_timeout"        // its lease ran out unextended
	ReasonMaxRetriesExceeded = "max_retries_exceeded" // no retries remained
	ReasonCanceled           = "canceled"             // canceled through the API
	ReasonInvalidResult      = "invalid_result"       // the handler's result could not be stored
	// dead_reason of a job canceled because a parent it depends on failed
	// or was canceled.
	ReasonDependencyFailed   = "dependency_failed"
	ReasonDependencyCanceled = "dependency_canceled"
)
