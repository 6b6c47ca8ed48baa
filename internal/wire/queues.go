package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// Queue names and the WORKER_QUEUES list, shared by the submitter (which
// checks the names it is given), the worker (which parses the list) and
// the coordinator (which checks what heartbeats carry).

// Limits of a queue list.
const (
	MaxQueueNameLen = 64
	MaxQueueWeight  = 1000
	MaxWorkerQueues = 64
)

// ValidQueueName reports whether q is 1 to 64 characters from
// A-Z a-z 0-9 _ . : -, the names a job's queue may have.
func ValidQueueName(q string) bool {
	if len(q) == 0 || len(q) > MaxQueueNameLen {
		return false
	}
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// ParseQueueWeights parses a WORKER_QUEUES list: comma-separated
// name[:weight] entries, such as "critical:6,default:3,low:1". A weight is
// an integer from 0 to 1000, 1 when left out; since a name may contain
// ':', the weight is what follows the last ':' when that is a number. An
// empty list means every queue (nil). A name given twice is an error.
func ParseQueueWeights(s string) ([]QueueWeight, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []QueueWeight
	seen := map[string]bool{}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		qw := QueueWeight{Name: e, Weight: 1}
		if i := strings.LastIndexByte(e, ':'); i >= 0 {
			if w, err := strconv.Atoi(e[i+1:]); err == nil {
				qw = QueueWeight{Name: e[:i], Weight: w}
			}
		}
		switch {
		case !ValidQueueName(qw.Name):
			return nil, fmt.Errorf("queue %q: a name is 1 to %d characters from A-Z a-z 0-9 _ . : -", qw.Name, MaxQueueNameLen)
		case qw.Weight < 0 || qw.Weight > MaxQueueWeight:
			return nil, fmt.Errorf("queue %q: weight %d is not between 0 and %d", qw.Name, qw.Weight, MaxQueueWeight)
		case seen[qw.Name]:
			return nil, fmt.Errorf("queue %q is named twice", qw.Name)
		}
		seen[qw.Name] = true
		out = append(out, qw)
	}
	if len(out) > MaxWorkerQueues {
		return nil, fmt.Errorf("%d queues: at most %d", len(out), MaxWorkerQueues)
	}
	return out, nil
}

// FormatQueueWeights is the inverse of ParseQueueWeights.
func FormatQueueWeights(qs []QueueWeight) string {
	parts := make([]string, len(qs))
	for i, q := range qs {
		parts[i] = q.Name + ":" + strconv.Itoa(q.Weight)
	}
	return strings.Join(parts, ",")
}

// QueueInfo is one queue as GET /queues shows it.
type QueueInfo struct {
	Name string `json:"name"`
	// Paused: its jobs are not leased (running ones finish).
	Paused bool `json:"paused"`
	// Concurrency is the most of its jobs leased at once across the
	// cluster; 0: no cap.
	Concurrency int `json:"concurrency"`
	// Depth is how many of its jobs are due and waiting; Pending counts
	// the waiting jobs not due yet too.
	Depth   int64 `json:"depth"`
	Pending int64 `json:"pending"`
	// OldestPendingSeconds is how long its oldest due job has waited.
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	Running              int64   `json:"running"`
	// CompletedPerMinute and FailedPerMinute count its jobs that finished
	// so in the last minute (failed: moved to the DLQ).
	CompletedPerMinute int64 `json:"completed_per_minute"`
	FailedPerMinute    int64 `json:"failed_per_minute"`
	// Dead counts its jobs in the dead-letter queue (failed), whenever
	// they failed: a queue idle but for dead jobs is listed with them.
	Dead int64 `json:"dead"`
}

// QueueListResponse is the body of GET /queues.
type QueueListResponse struct {
	Queues []QueueInfo `json:"queues"`
}

// QueueUpdateRequest is the body of PUT or POST /queues/{name}.
type QueueUpdateRequest struct {
	// Concurrency caps how many of the queue's jobs are leased at once
	// across the cluster, 0 to 1000000; 0 removes the cap. Required.
	Concurrency *int `json:"concurrency"`
}

// MaxQueueConcurrency is the largest cap PUT /queues/{name} takes.
const MaxQueueConcurrency = 1_000_000
