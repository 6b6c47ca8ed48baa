package ui

import (
	"time"

	"github.com/dtsched/dts/internal/job"
)

// The console's own types for what it asks the Service for. The submitter
// fills them from its store; the console never sees the store.

// ListParams selects a page of jobs, newest first: the filters of GET
// /jobs. Zero values filter nothing. It is comparable, so that pages
// asked for at once share one read (live.go).
type ListParams struct {
	State job.State
	Name  string
	Queue string
	// Fingerprint keeps the dead jobs whose error has this fingerprint:
	// with Name, one dead-letter group.
	Fingerprint string
	Before      int64 // cursor: only ids below this
	Limit       int   // 0 or less: the service's default
}

// Scan holds the tests of a search that no index serves (query.go); zero
// values test nothing.
type Scan struct {
	Text string // the payload's JSON text holds it
	// Path and PathValue: the payload's value at Path (object keys or
	// array indexes) is PathValue as text: a string without its quotes, a
	// number or true/false as written.
	Path      []string
	PathValue string
	Worker    string // the job's worker (of its lease, or of its last attempt) is this one
	Error     string // the job's last error holds it, in any case
}

// Empty says whether s tests nothing.
func (s Scan) Empty() bool {
	return s.Text == "" && s.Path == nil && s.Worker == "" && s.Error == ""
}

// RollupRow is one minute of one job name (Name "" for all), as the
// leader wrote it: the charts' data.
type RollupRow struct {
	Minute    time.Time
	Name      string
	Completed int64
	Failed    int64
	Started   int64
	// StartP50, StartP95: submit-to-start of the jobs started in the
	// minute, in milliseconds; nil when none started.
	StartP50, StartP95 *float64
	// QueueDepth, OldestPending: the due jobs and the oldest one's wait in
	// seconds, when the row was written.
	QueueDepth    int64
	OldestPending float64
}

// DeadGroup is the dead jobs of one name whose errors have one
// fingerprint.
type DeadGroup struct {
	Name string
	// Fingerprint is "" for dead jobs without one: such a group cannot be
	// selected by fingerprint.
	Fingerprint string
	Count       int64
	LastFailed  time.Time // the newest failure of the group
	NewestID    int64     // the group's newest job (highest id)
	Sample      string    // that job's error, as stored
}

// DeadGroups is the dead-letter queue's largest groups and how many there
// are.
type DeadGroups struct {
	Groups []DeadGroup // the largest first (ties: the most recently failed)
	Total  int64       // groups in all
	Dead   int64       // dead jobs in all
}
