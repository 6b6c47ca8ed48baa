package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds one attempt's run: its handler call, how its context's
// cancel cause becomes an outcome, and the hand-over of its result to the
// sender.

// Causes of an attempt's context being canceled.
var (
	errShutdown = errors.New("worker shutting down")
	errCanceled = errors.New("job canceled")
	errTimeout  = errors.New("job timed out")
	// A newer lease of the job arrived: the old lease has ended.
	errSuperseded = errors.New("a newer lease of this job arrived")
)

type attempt struct {
	jobID  int64
	cancel context.CancelCauseFunc
	// started: it holds a slot and its handler was called, at
	// startedAt (under Worker.mu). A prefetched attempt waits for a slot
	// first.
	started   bool
	startedAt time.Time
	// Progress reports, under Worker.mu: the latest not yet queued, when
	// the last one was queued, and the timer that queues the latest once
	// progressInterval has passed.
	progress  *wire.Result
	lastSent  time.Time
	progTimer *time.Timer
	// logsOnly: progress is not the handler's report but one that carries
	// its log's lines, repeating the latest report sent (lastPct,
	// lastMsg). logs is the attempt's log, once the handler asked for
	// its Logger (logs.go).
	logsOnly bool
	lastPct  int
	lastMsg  string
	logs     *attemptLog
}

// progressInterval is the least time between two progress reports of one
// attempt: a handler may call Job.Progress in a tight loop, and only the
// latest report within an interval is sent.
const progressInterval = time.Second

// reportProgress queues a progress report of the attempt under token, at
// most one per progressInterval, the latest winning. A report for an
// attempt that has ended is dropped.
func (w *Worker) reportProgress(jobID, token int64, attemptNo, pct int, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.running[token]
	if !ok || a.jobID != jobID {
		return
	}
	a.progress = &wire.Result{JobID: jobID, LeaseToken: token, WorkerID: w.cfg.ID, Attempt: attemptNo,
		Outcome: wire.OutcomeProgress, Progress: pct, Message: msg, StartedAt: time.Now()}
	a.logsOnly = false
	w.scheduleProgressLocked(a, token, a.lastSent)
}

// scheduleProgressLocked queues the attempt's pending report now, or when
// progressInterval has passed since since. w.mu is held.
func (w *Worker) scheduleProgressLocked(a *attempt, token int64, since time.Time) {
	if a.progTimer != nil {
		return // queued when the timer fires, the latest then
	}
	wait := time.Until(since.Add(progressInterval))
	if wait <= 0 {
		w.queueProgressLocked(a)
		return
	}
	a.progTimer = time.AfterFunc(wait, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		a.progTimer = nil
		if w.running[token] == a && a.progress != nil {
			w.queueProgressLocked(a)
		}
	})
}

// queueProgressLocked hands the attempt's latest report to the sender,
// ahead of the attempt's result (the stream keeps the order), with the
// lines its log holds. w.mu is held.
func (w *Worker) queueProgressLocked(a *attempt) {
	p := *a.progress
	p.Logs = a.logs.take(false)
	a.progress = nil
	if a.logsOnly && p.Logs == nil {
		return // the lines went with an earlier report
	}
	if !a.logsOnly {
		a.lastPct, a.lastMsg = p.Progress, p.Message
	}
	w.toSend = append(w.toSend, p)
	a.lastSent = time.Now()
	select {
	case w.queued <- struct{}{}:
	default:
	}
}

// execute runs one attempt and turns its outcome into a result.
func (w *Worker) execute(ctx context.Context, h HandlerFunc, d wire.Delivery) (r wire.Result) {
	r = wire.Result{JobID: d.JobID, LeaseToken: d.LeaseToken, WorkerID: w.cfg.ID, Attempt: d.Attempt, StartedAt: time.Now()}
	// Built only when a line is written: the success path logs nothing at
	// info, and this runs once per job.
	log := func() *slog.Logger { return w.log.With("job_id", d.JobID, "attempt", d.Attempt, "name", d.Name) }
	defer func() {
		r.FinishedAt = time.Now()
		if p := recover(); p != nil {
			r.Outcome, r.Reason, r.Error, r.Result = wire.OutcomeFailed, job.ReasonError, fmt.Sprintf("handler panicked: %v", p), nil
			log().ErrorContext(ctx, "handler panicked", "panic", fmt.Sprint(p))
		}
	}()
	if h == nil {
		r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonPermanent, "no handler for job type "+strconv.Quote(d.Name)
		return r
	}
	// The closure takes copies of the three fields, not d: a captured d
	// larger than 128 bytes would be moved to the heap for every attempt.
	jobID, token, attemptNo := d.JobID, d.LeaseToken, d.Attempt
	j := &Job{ID: strconv.FormatInt(d.JobID, 10), Name: d.Name, Queue: d.Queue, Payload: d.Payload, Attempt: d.Attempt,
		MaxRetries: d.MaxRetries, WorkerID: w.cfg.ID, CreatedAt: d.CreatedAt,
		progress: func(pct int, msg string) { w.reportProgress(jobID, token, attemptNo, pct, msg) },
		w:        w, jobID: d.JobID, token: d.LeaseToken}
	if w.log.Enabled(ctx, slog.LevelDebug) {
		log().DebugContext(ctx, "attempt started")
	}
	res, err := h(ctx, j)
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errShutdown):
		r.Outcome, r.Reason, r.Error = wire.OutcomeReleased, "shutdown", "worker shut down"
	case errors.Is(cause, errSuperseded):
		r.Outcome, r.Reason, r.Error = wire.OutcomeReleased, "superseded", errSuperseded.Error()
	case errors.Is(cause, errCanceled):
		r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonCanceled, "canceled"
	case errors.Is(cause, errTimeout):
		r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonTimeout, fmt.Sprintf("timed out after %ds", d.TimeoutSeconds)
	case err != nil:
		r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonError, err.Error()
		if IsPermanent(err) {
			r.Reason = job.ReasonPermanent
		}
	default:
		r.Outcome = wire.OutcomeCompleted
		if res != nil {
			b, err := json.Marshal(res)
			if err != nil {
				r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonPermanent, "result does not encode to JSON: "+err.Error()
			} else {
				r.Result = b
			}
		}
	}
	if r.Outcome != wire.OutcomeCompleted {
		log().InfoContext(ctx, "attempt did not succeed", "outcome", r.Outcome, "reason", r.Reason, "error", r.Error)
	}
	return r
}

// report moves an attempt from running to unsent and queues its result.
func (w *Worker) report(r wire.Result, label string) {
	w.mu.Lock()
	var started time.Time // zero: it never ran
	if a := w.running[r.LeaseToken]; a != nil {
		if a.progress != nil && a.logsOnly {
			a.progress = nil // its lines go with the result
		}
		if a.progress != nil {
			// The latest report goes ahead of the result, unthrottled.
			w.queueProgressLocked(a)
		}
		if a.logs != nil {
			r.Logs = a.logs.take(true)
		}
		if a.progTimer != nil {
			a.progTimer.Stop() // nothing is left for it to queue
		}
		started = a.startedAt
	}
	delete(w.running, r.LeaseToken)
	w.finished.Add(1)
	w.unsent[r.LeaseToken] = started
	w.toSend = append(w.toSend, r)
	w.mu.Unlock()
	w.metrics.finished.WithLabelValues(label, r.Outcome).Inc()
	if !r.StartedAt.IsZero() {
		w.metrics.duration.WithLabelValues(label).Observe(r.FinishedAt.Sub(r.StartedAt).Seconds())
	}
	select {
	case w.queued <- struct{}{}:
	default: // the sender has been told already
	}
}
