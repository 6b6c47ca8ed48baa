package wire

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Per-job logs: the lines a handler logs during an attempt travel with the
// attempt's progress reports and its result (Result.Logs), and GET
// /jobs/{id}/logs shows them (JobLogs).

// Bounds of the lines a handler logs (docs/protocol.md, "Logs").
const (
	// MaxAttemptLogBytes bounds the lines of one attempt a worker holds
	// and the coordinator stores: past it the oldest are dropped and
	// counted.
	MaxAttemptLogBytes = 64 << 10
	// MaxJobLogBytes bounds the lines stored for one job, all attempts
	// together: past it the oldest are dropped (an earlier attempt's
	// first) and counted.
	MaxJobLogBytes = 256 << 10
	// MaxLogLineBytes bounds one line's message; a longer one is cut.
	MaxLogLineBytes = 8 << 10
	// LogLineOverhead is what a line counts besides its message's bytes,
	// so that a flood of empty lines is bounded too.
	LogLineOverhead = 32
	// MaxLogLevelLen bounds a line's level.
	MaxLogLevelLen = 16
)

// LogLine is one line a handler logged.
type LogLine struct {
	Time  time.Time `json:"time"`
	Level string    `json:"level"` // DEBUG, INFO, WARN or ERROR (log/slog's names)
	// Message is the message, then the line's attributes as key=value,
	// separated by spaces.
	Message string `json:"message"`
}

// Size is what a line counts against MaxAttemptLogBytes and
// MaxJobLogBytes.
func (l *LogLine) Size() int { return len(l.Message) + LogLineOverhead }

// Logs are the lines of an attempt a result or progress report carries:
// those logged since the attempt's previous report, oldest first, and how
// many lines the worker dropped before them (beyond MaxAttemptLogBytes).
type Logs struct {
	Lines   []LogLine `json:"lines"`
	Dropped int64     `json:"dropped,omitempty"`
}

// CutLogText makes s valid UTF-8 of at most max bytes, cut on a character
// boundary.
func CutLogText(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// JobLogLine is one stored line as GET /jobs/{id}/logs shows it.
type JobLogLine struct {
	// Seq orders a job's lines; a follower passes the last one it saw
	// as ?after= to get only newer lines.
	Seq     int64     `json:"seq"`
	Attempt int       `json:"attempt"`
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
}

// JobLogDropped is how many lines of one attempt were dropped: by its
// worker or the coordinator (past MaxAttemptLogBytes), or to keep the job
// within MaxJobLogBytes.
type JobLogDropped struct {
	Attempt int   `json:"attempt"`
	Dropped int64 `json:"dropped"`
}

// JobLogs is the body of GET /jobs/{id}/logs.
type JobLogs struct {
	JobID string       `json:"job_id"`
	Lines []JobLogLine `json:"lines"`
	// Dropped lists the attempts that lost lines (only the one asked
	// for, with ?attempt=).
	Dropped []JobLogDropped `json:"dropped"`
	// NextAfter is the ?after= that returns the lines after these: the
	// last line's seq, or the request's after when there is none.
	NextAfter int64 `json:"next_after"`
	// More: the page was full; ask again with NextAfter.
	More bool `json:"more"`
}

// MaxJobLogPage is the most lines GET /jobs/{id}/logs returns at once
// (and its default).
const MaxJobLogPage = 5000

// Bound makes logs from a worker storable and bounded, in place: each
// level cut to MaxLogLevelLen bytes and each message to MaxLogLineBytes,
// both valid UTF-8 without NULs; the oldest lines beyond
// MaxAttemptLogBytes dropped and counted in Dropped (a negative Dropped
// becomes 0). A nil l stays nil.
func (l *Logs) Bound() {
	if l == nil {
		return
	}
	l.Dropped = max(l.Dropped, 0)
	size, keep := 0, len(l.Lines)
	for i := len(l.Lines) - 1; i >= 0; i-- {
		ln := &l.Lines[i]
		ln.Level = CutLogText(dropNUL(ln.Level), MaxLogLevelLen)
		ln.Message = CutLogText(dropNUL(ln.Message), MaxLogLineBytes)
		if size+ln.Size() > MaxAttemptLogBytes {
			break
		}
		size += ln.Size()
		keep = i
	}
	if keep > 0 {
		l.Dropped += int64(keep)
		l.Lines = l.Lines[keep:]
	}
}

func dropNUL(s string) string {
	if strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(s, "\x00", "")
}
