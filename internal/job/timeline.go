package job

import (
	"cmp"
	"slices"
	"time"
)

// A job's timeline is assembled from what the job already keeps, so that
// nothing is written per lease, completion or heartbeat to draw it (the
// hot path stays as it is; docs/state_machine.md, "What a job remembers
// of its attempts"):
//
//   - the row: its submission, the current lease (worker, start, expiry,
//     extensions) or the last one that completed (LastLeaseToken), and
//     the final state;
//   - Errors: one entry per ended attempt that failed, was reclaimed or
//     died, with its lease's token, start, end, backoff and next state
//     (older entries carry only attempt, error, reason, worker and end);
//   - Events: the rare things the row cannot hold (job_events: a result
//     rejected as stale, a lease handed back; audit_log: an operator's
//     action on the job).
//
// The token of a lease still running is never put in a timeline: a
// result must carry it to be applied, so it stays between the leader and
// the worker (docs/security.md). Tokens of ended leases are harmless:
// results that carry them are rejected.

// Kinds of Event.
const (
	EventStaleResult = "stale_result" // a result whose lease had ended or was never its sender's
	EventReleased    = "released"     // a lease handed back; the attempt did not count
	EventOperator    = "operator"     // an action of the audit log on this job
)

// Event is something that happened to a job that its row does not keep.
// The JSON names are those of job_events.detail.
type Event struct {
	At   time.Time `json:"-"`
	Kind string    `json:"-"`
	// Stale results and hand-backs: the lease as the sender named it.
	WorkerID   string `json:"worker_id,omitempty"`
	LeaseToken int64  `json:"token,omitempty"`
	Attempt    int    `json:"attempt,omitempty"`
	// Outcome is what a rejected result said (completed, failed, released).
	Outcome string `json:"outcome,omitempty"`
	// Hand-backs: when the attempt started, its lease's extensions, and
	// the state the job went to (pending, or canceled when a cancel was
	// requested).
	StartedAt  *time.Time `json:"started,omitempty"`
	Extensions int        `json:"extended,omitempty"`
	NextState  State      `json:"next_state,omitempty"`
	// Operator actions: the audit log's action (job.cancel, job.requeue,
	// job.run_now), actor ("" when the reader may not see actors) and
	// result (ok, failed, or attempted when the outcome was never
	// recorded).
	Action string `json:"-"`
	Actor  string `json:"-"`
	Result string `json:"-"`
}

// Kinds of TimelineEntry, in the order entries at the same instant are
// listed.
const (
	EntrySubmitted   = "submitted"
	EntryOperator    = "operator"
	EntryLeased      = "leased"    // an attempt started under a lease
	EntryCompleted   = "completed" // the attempt succeeded
	EntryFailed      = "failed"    // the attempt failed, was reclaimed or timed out
	EntryReleased    = "released"  // the lease was handed back; the attempt did not count
	EntryBackoff     = "backoff"   // retrying: due again at Until
	EntryDead        = "dead"      // moved to the dead-letter queue (Reason: why)
	EntryCanceled    = "canceled"  // canceled (Reason: a dependency's, when one)
	EntryStaleResult = "stale_result"
)

var entryRank = map[string]int{
	EntrySubmitted: 0, EntryOperator: 1, EntryLeased: 2, EntryCompleted: 3, EntryFailed: 3, EntryReleased: 3,
	EntryBackoff: 4, EntryDead: 5, EntryCanceled: 5, EntryStaleResult: 6,
}

// TimelineEntry is one line of a job's timeline.
type TimelineEntry struct {
	At         time.Time
	Kind       string // Entry*
	Attempt    int    // 0: none or unknown
	WorkerID   string
	LeaseToken int64 // 0: unknown, or withheld (a live lease)
	// Live marks the lease that is running now (leased), or a stale
	// result that carried its token (stale_result; the token is withheld).
	Live bool
	// Until: a backoff's end (backoff); a live lease's expiry (leased).
	Until *time.Time
	// Extensions counts a lease's heartbeat extensions (leased).
	Extensions int
	Reason     string // failed: the attempt's reason; dead, canceled: why
	Error      string // failed: the error; canceled by a dependency: which
	Outcome    string // stale_result: what the rejected result said
	// OfAttempt is, for a stale result, the attempt whose (ended) lease
	// its token names; 0 when it names no lease this job remembers
	// (forged, or older than the history).
	OfAttempt int
	// Operator actions.
	Action, Actor, Result string
}

// Attempt is one row of a job's attempts table.
type Attempt struct {
	Attempt    int // as numbered when it ran (a requeue starts again at 1)
	WorkerID   string
	LeaseToken int64 // 0: unknown, or withheld (Live)
	Live       bool  // running now
	StartedAt  *time.Time
	EndedAt    *time.Time
	Extensions int
	// Outcome is "running", "completed", "released", or the failure's
	// reason (error, timeout, worker_failure, ...).
	Outcome   string
	Error     string
	NextState State      // the state it led to, when known
	RetryAt   *time.Time // the backoff's end, when it led to retrying
	// ExpiresAt is a live lease's deadline.
	ExpiresAt *time.Time
}

// Duration is how long the attempt ran, when both ends are known.
func (a Attempt) Duration() (time.Duration, bool) {
	if a.StartedAt == nil || a.EndedAt == nil {
		return 0, false
	}
	return a.EndedAt.Sub(*a.StartedAt), true
}

// Timeline is a job's history, oldest first.
type Timeline struct {
	Entries  []TimelineEntry
	Attempts []Attempt
}

// BuildTimeline assembles j's timeline from its row and errors and the
// events given (any order). It reads nothing else and keeps no state.
func BuildTimeline(j *Job, events []Event) Timeline {
	var t Timeline
	add := func(e TimelineEntry) { t.Entries = append(t.Entries, e) }
	add(TimelineEntry{At: j.CreatedAt, Kind: EntrySubmitted})

	tokens := map[int64]int{} // ended lease token → attempt
	canceled, deadLast := false, false
	for i, e := range j.Errors {
		last := i == len(j.Errors)-1
		a := Attempt{Attempt: e.Attempt, WorkerID: e.WorkerID, LeaseToken: e.LeaseToken, StartedAt: e.StartedAt,
			EndedAt: ptr(e.At), Extensions: e.Extensions, Outcome: e.Reason, Error: e.Error, NextState: e.NextState,
			RetryAt: e.RetryAt}
		t.Attempts = append(t.Attempts, a)
		if e.LeaseToken != 0 {
			tokens[e.LeaseToken] = e.Attempt
		}
		if e.StartedAt != nil {
			add(TimelineEntry{At: *e.StartedAt, Kind: EntryLeased, Attempt: e.Attempt, WorkerID: e.WorkerID,
				LeaseToken: e.LeaseToken, Extensions: e.Extensions})
		}
		add(TimelineEntry{At: e.At, Kind: EntryFailed, Attempt: e.Attempt, WorkerID: e.WorkerID, LeaseToken: e.LeaseToken,
			Reason: e.Reason, Error: e.Error})
		switch {
		case e.NextState == StateRetrying && e.RetryAt != nil:
			add(TimelineEntry{At: e.At, Kind: EntryBackoff, Attempt: e.Attempt, Until: e.RetryAt})
		case e.NextState == StateFailed:
			why := ReasonMaxRetriesExceeded
			if e.Reason == ReasonPermanent {
				why = ReasonPermanent
			}
			if last && j.State == StateFailed && j.DeadReason != "" {
				why = j.DeadReason
			}
			add(TimelineEntry{At: e.At, Kind: EntryDead, Attempt: e.Attempt, Reason: why})
			deadLast = last
		case e.NextState == StateCanceled:
			canceled = true
			add(TimelineEntry{At: e.At, Kind: EntryCanceled, Attempt: e.Attempt})
		}
	}
	if j.State == StateFailed && !deadLast {
		// Dead, and the last entry does not say so: it is from before
		// next_state was recorded (or there is none). The row's word.
		add(TimelineEntry{At: deref(j.FinishedAt, j.CreatedAt), Kind: EntryDead, Attempt: j.Attempts, Reason: j.DeadReason})
	}

	for _, ev := range events {
		switch ev.Kind {
		case EventReleased:
			t.Attempts = append(t.Attempts, Attempt{Attempt: ev.Attempt, WorkerID: ev.WorkerID, LeaseToken: ev.LeaseToken,
				StartedAt: ev.StartedAt, EndedAt: ptr(ev.At), Extensions: ev.Extensions, Outcome: EntryReleased,
				NextState: ev.NextState})
			if ev.LeaseToken != 0 {
				tokens[ev.LeaseToken] = ev.Attempt
			}
			if ev.StartedAt != nil {
				add(TimelineEntry{At: *ev.StartedAt, Kind: EntryLeased, Attempt: ev.Attempt, WorkerID: ev.WorkerID,
					LeaseToken: ev.LeaseToken, Extensions: ev.Extensions})
			}
			add(TimelineEntry{At: ev.At, Kind: EntryReleased, Attempt: ev.Attempt, WorkerID: ev.WorkerID, LeaseToken: ev.LeaseToken})
			if ev.NextState == StateCanceled {
				canceled = true
				add(TimelineEntry{At: ev.At, Kind: EntryCanceled, Attempt: ev.Attempt})
			}
		case EventOperator:
			add(TimelineEntry{At: ev.At, Kind: EntryOperator, Action: ev.Action, Actor: ev.Actor, Result: ev.Result})
		}
	}

	// The current or last attempt, from the row.
	switch j.State {
	case StateLeased:
		start := deref(j.StartedAt, j.CreatedAt)
		t.Attempts = append(t.Attempts, Attempt{Attempt: j.Attempts, WorkerID: j.WorkerID, Live: true, StartedAt: ptr(start),
			Extensions: j.LeaseExtensions, Outcome: "running", ExpiresAt: j.LeaseExpiresAt})
		add(TimelineEntry{At: start, Kind: EntryLeased, Attempt: j.Attempts, WorkerID: j.WorkerID, Live: true,
			Until: j.LeaseExpiresAt, Extensions: j.LeaseExtensions})
	case StateCompleted:
		end := deref(j.FinishedAt, j.CreatedAt)
		a := Attempt{Attempt: j.Attempts, WorkerID: j.WorkerID, LeaseToken: j.LastLeaseToken, StartedAt: j.StartedAt,
			EndedAt: ptr(end), Extensions: j.LeaseExtensions, Outcome: EntryCompleted, NextState: StateCompleted}
		t.Attempts = append(t.Attempts, a)
		if j.LastLeaseToken != 0 {
			tokens[j.LastLeaseToken] = j.Attempts
		}
		if j.StartedAt != nil {
			add(TimelineEntry{At: *j.StartedAt, Kind: EntryLeased, Attempt: j.Attempts, WorkerID: j.WorkerID,
				LeaseToken: j.LastLeaseToken, Extensions: j.LeaseExtensions})
		}
		add(TimelineEntry{At: end, Kind: EntryCompleted, Attempt: j.Attempts, WorkerID: j.WorkerID, LeaseToken: j.LastLeaseToken})
	case StateCanceled:
		if !canceled { // canceled while not leased, or by a dependency
			add(TimelineEntry{At: deref(j.FinishedAt, j.CreatedAt), Kind: EntryCanceled, Reason: j.DeadReason, Error: depError(j)})
		}
	}

	// Stale results last: they name the attempts above by token. One
	// that carried the running lease's token (rejected because another
	// worker sent it) does not show it.
	for _, ev := range events {
		if ev.Kind != EventStaleResult {
			continue
		}
		e := TimelineEntry{At: ev.At, Kind: EntryStaleResult, Attempt: ev.Attempt, WorkerID: ev.WorkerID,
			LeaseToken: ev.LeaseToken, Outcome: ev.Outcome, OfAttempt: tokens[ev.LeaseToken]}
		if j.State == StateLeased && ev.LeaseToken == j.LeaseToken {
			e.LeaseToken, e.Live, e.OfAttempt = 0, true, j.Attempts
		}
		add(e)
	}

	slices.SortStableFunc(t.Entries, func(a, b TimelineEntry) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(entryRank[a.Kind], entryRank[b.Kind]))
	})
	slices.SortStableFunc(t.Attempts, func(a, b Attempt) int { return attemptKey(a).Compare(attemptKey(b)) })
	return t
}

// attemptKey orders attempts by their start, or their end when the start
// is unknown (errors entries from before migration 014).
func attemptKey(a Attempt) time.Time {
	switch {
	case a.StartedAt != nil:
		return *a.StartedAt
	case a.EndedAt != nil:
		return *a.EndedAt
	}
	return time.Time{}
}

// depError is the parent a dependency cancel names (last_error), for a
// job canceled by a dependency.
func depError(j *Job) string {
	if j.DeadReason == ReasonDependencyFailed || j.DeadReason == ReasonDependencyCanceled {
		return j.LastError
	}
	return ""
}

func ptr(t time.Time) *time.Time { return &t }

func deref(t *time.Time, or time.Time) time.Time {
	if t == nil {
		return or
	}
	return *t
}
