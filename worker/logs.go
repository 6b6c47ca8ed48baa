package worker

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/dtsched/dts/internal/wire"
)

// This file holds a job's own log (Job.Logger): the lines a handler logs
// during an attempt are kept, bounded, and sent with the attempt's
// progress reports and its result; GET /jobs/{id}/logs and dtsctl jobs
// logs show them. Nothing here runs for a handler that never calls
// Logger.

// Logger returns the attempt's logger. What a handler logs with it
// (every level) is kept with the job: each line with its time, level,
// message and attributes (as key=value), the newest 64 KiB of the attempt
// (older lines are dropped and counted). Lines travel on the results
// stream at most once a second while the attempt runs, and the rest with
// its result; lines logged after the handler returned are dropped. Each
// line also goes to the worker's own log at debug level, with job_id and
// attempt. On a Job the worker did not create the lines are kept but sent
// nowhere.
func (j *Job) Logger() *slog.Logger {
	j.logMu.Lock()
	defer j.logMu.Unlock()
	if j.logger == nil {
		l := &attemptLog{}
		h := &lineHandler{log: l}
		if j.w != nil {
			w, jobID, token, attemptNo := j.w, j.jobID, j.token, j.Attempt
			l.notify = func() { w.logsWaiting(jobID, token, attemptNo) }
			if w.log.Enabled(context.Background(), slog.LevelDebug) {
				h.mirror = w.log.With("job_id", jobID, "attempt", attemptNo, "name", j.Name).Handler()
			}
			w.attachLog(token, jobID, l)
		}
		j.logger = slog.New(h)
	}
	return j.logger
}

// attemptLog holds an attempt's lines not yet handed to the sender.
type attemptLog struct {
	mu      sync.Mutex
	lines   []wire.LogLine
	size    int   // of lines, as wire.LogLine.Size counts
	dropped int64 // lines dropped since the last take
	closed  bool  // the attempt has ended: later lines are dropped
	// notify, if set, is called (without mu) when a line arrives in an
	// empty log: the worker then schedules a report that carries it.
	notify func()
}

func (l *attemptLog) add(line wire.LogLine) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	wasEmpty := len(l.lines) == 0
	l.lines = append(l.lines, line)
	l.size += line.Size()
	drop := 0
	for l.size > wire.MaxAttemptLogBytes && drop < len(l.lines)-1 {
		l.size -= l.lines[drop].Size()
		drop++
	}
	if drop > 0 {
		l.dropped += int64(drop)
		l.lines = append(l.lines[:0:0], l.lines[drop:]...) // let the dropped go
	}
	notify := wasEmpty && l.notify != nil
	l.mu.Unlock()
	if notify {
		l.notify()
	}
}

// take returns the lines held and the count of those dropped before them,
// and empties the log; nil when it holds neither. close also stops the log
// taking lines.
func (l *attemptLog) take(close bool) *wire.Logs {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = l.closed || close
	if len(l.lines) == 0 && l.dropped == 0 {
		return nil
	}
	out := &wire.Logs{Lines: l.lines, Dropped: l.dropped}
	l.lines, l.size, l.dropped = nil, 0, 0
	return out
}

// lineHandler is the slog.Handler of Job.Logger: it renders each record
// into one wire.LogLine of the attempt's log, and copies it to the
// worker's log at debug level when that is on.
type lineHandler struct {
	log    *attemptLog
	prefix string       // attributes added by WithAttrs, rendered
	group  string       // the open group, "a.b." ("" for none)
	mirror slog.Handler // the worker's log, if it logs at debug
}

func (h *lineHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *lineHandler) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	b.WriteString(h.prefix)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.group, a)
		return true
	})
	at := r.Time
	if at.IsZero() {
		at = time.Now()
	}
	h.log.add(wire.LogLine{Time: at, Level: r.Level.String(), Message: wire.CutLogText(b.String(), wire.MaxLogLineBytes)})
	if h.mirror != nil && h.mirror.Enabled(ctx, slog.LevelDebug) {
		m := slog.NewRecord(at, slog.LevelDebug, r.Message, r.PC)
		m.AddAttrs(slog.String("handler_level", r.Level.String()))
		r.Attrs(func(a slog.Attr) bool { m.AddAttrs(a); return true })
		_ = h.mirror.Handle(ctx, m)
	}
	return nil
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range as {
		appendAttr(&b, h.group, a)
	}
	h2 := *h
	h2.prefix = b.String()
	if h.mirror != nil {
		h2.mirror = h.mirror.WithAttrs(as)
	}
	return &h2
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.group = h.group + name + "."
	if h.mirror != nil {
		h2.mirror = h.mirror.WithGroup(name)
	}
	return &h2
}

// appendAttr writes " key=value" (a group's members as group.key=value),
// quoting a value that is empty or holds a space, a quote, an = or a
// control character.
func appendAttr(b *strings.Builder, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		g := group
		if a.Key != "" {
			g += a.Key + "."
		}
		for _, m := range a.Value.Group() {
			appendAttr(b, g, m)
		}
		return
	}
	b.WriteByte(' ')
	b.WriteString(group)
	b.WriteString(a.Key)
	b.WriteByte('=')
	var v string
	switch a.Value.Kind() {
	case slog.KindTime:
		v = a.Value.Time().Format(time.RFC3339Nano)
	default:
		v = a.Value.String()
	}
	if needsQuote(v) {
		v = strconv.Quote(v)
	}
	b.WriteString(v)
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range s {
		if r == ' ' || r == '"' || r == '=' || unicode.IsControl(r) || r == 0xFFFD {
			return true
		}
	}
	return false
}

// attachLog gives the running attempt under token its log, for its
// reports to carry.
func (w *Worker) attachLog(token, jobID int64, l *attemptLog) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a, ok := w.running[token]; ok && a.jobID == jobID {
		a.logs = l
	}
}

// logsWaiting schedules a report that carries the lines waiting in the
// attempt's log: its pending progress report if it has one, else a
// report that repeats its latest progress (at most one per
// progressInterval, as progress reports, and none in the attempt's first
// interval). The coordinator takes a report
// with lines and neither a percentage nor a message for lines only.
func (w *Worker) logsWaiting(jobID, token int64, attemptNo int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.running[token]
	if !ok || a.jobID != jobID {
		return
	}
	if a.progress == nil {
		a.progress = &wire.Result{JobID: jobID, LeaseToken: token, WorkerID: w.cfg.ID, Attempt: attemptNo,
			Outcome: wire.OutcomeProgress, Progress: a.lastPct, Message: a.lastMsg, StartedAt: time.Now()}
		a.logsOnly = true
	}
	// Not before the attempt has run for an interval: a short attempt's
	// lines go with its result alone.
	since := a.lastSent
	if a.startedAt.After(since) {
		since = a.startedAt
	}
	w.scheduleProgressLocked(a, token, since)
}
