package worker

import (
	"context"
	"errors"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/retry"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the receive side: the loop that takes deliveries and
// cancels from the worker's Redis list, and what it does with each.

func (w *Worker) receiveLoop(ctx context.Context) {
	per := 0 // bytes per delivery of the last receive that got some
	for ctx.Err() == nil {
		in, err := w.q.Receive(ctx, w.cfg.ID, receiveCount(w.cfg.Concurrency+int(w.prefetch.Load()), per), time.Second)
		if n := len(in.Deliveries) + in.Bad; n > 0 {
			per = in.DeliveryBytes / n
		}
		if err != nil {
			if ctx.Err() == nil {
				w.metrics.countRedisError(redisOpReceive)
				w.log.ErrorContext(ctx, "receive failed", "error", err)
				_ = retry.Sleep(ctx, 200*time.Millisecond)
			}
			continue
		}
		w.handleInbox(ctx, in, false)
	}
}

// receiveBytes bounds, roughly, the deliveries one receive pops. Redis
// builds a reply whole before it serves anyone else, so popping a
// thousand large payloads at once holds up every other worker's
// heartbeats and results meanwhile.
const receiveBytes = 16 << 20

// receiveCount is how many deliveries the next receive asks for: every
// slot's worth (max), or fewer when the last receive's deliveries, per
// bytes each, say that would be more than receiveBytes.
func receiveCount(max, per int) int {
	if per <= 0 {
		return max
	}
	return min(max, 1+receiveBytes/per)
}

func (w *Worker) handleInbox(ctx context.Context, in queue.Inbox, release bool) {
	if in.Bad > 0 {
		w.metrics.badMessages.Add(float64(in.Bad))
	}
	for _, c := range in.Controls {
		if c.Op == wire.OpCancel {
			w.cancelJob(ctx, c.JobID, c.LeaseToken)
		}
	}
	for _, d := range in.Deliveries {
		w.accept(ctx, d, release)
	}
}

// releaseQueued hands back deliveries that arrived but were not started.
func (w *Worker) releaseQueued(ctx context.Context) {
	for {
		in, err := w.q.Receive(ctx, w.cfg.ID, 1000, 0)
		if err != nil || (len(in.Deliveries) == 0 && len(in.Controls) == 0) {
			return
		}
		w.handleInbox(ctx, in, true)
	}
}

// cancelJob cancels a running attempt, or remembers the cancel for a
// delivery not received yet (the control list is read before the job list,
// so a cancel can overtake its job). A cancel without a token names the
// job's newest lease here.
func (w *Worker) cancelJob(ctx context.Context, id, token int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if token == 0 {
		token = w.newest[id]
	}
	if a, ok := w.running[token]; ok && a.jobID == id {
		w.log.InfoContext(ctx, "canceling job on request", "job_id", id, "lease_token", token)
		a.cancel(errCanceled)
		return
	}
	if token == 0 || w.seen.has[token] {
		return // nothing of the job here, or that attempt has ended
	}
	if len(w.canceled) >= remembered { // bound it: forget the oldest guesses
		clear(w.canceled)
	}
	w.canceled[token] = id
}

func (w *Worker) cancelAll(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.running {
		a.cancel(cause)
	}
}

// cancelWaiting cancels the attempts still waiting for a slot (prefetched).
func (w *Worker) cancelWaiting(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.running {
		if !a.started {
			a.cancel(cause)
		}
	}
}

// accept takes one delivery: it starts it, or reports it handed back if
// release is set, or reports it failed if it was canceled before it came.
// Deliveries are keyed by lease token. The same lease delivered twice runs
// once. A newer lease of a job whose attempt still runs here cancels that
// attempt (its lease has ended; the coordinator rejects its result by token)
// and runs; an older one, arriving late, is dropped. ctx is for logging.
func (w *Worker) accept(ctx context.Context, d wire.Delivery, release bool) {
	h, ok := w.handlers[d.Name]
	label := d.Name
	if !ok {
		h, label = w.handlers["*"], "other"
	}
	w.mu.Lock()
	_, running := w.running[d.LeaseToken]
	_, unsent := w.unsent[d.LeaseToken]
	if running || unsent || w.seen.has[d.LeaseToken] {
		w.mu.Unlock()
		return // the same lease delivered twice
	}
	w.seen.add(d.LeaseToken)
	// Lease tokens are random, so they say nothing of which lease is
	// newer: the one delivered later is (the list is FIFO, and a job is
	// leased again only after its lease ended).
	if old, ok := w.newest[d.JobID]; ok {
		if a, ok := w.running[old]; ok {
			w.log.InfoContext(ctx, "a new lease of a running job arrived: canceling the old attempt",
				"job_id", d.JobID, "lease_token", d.LeaseToken, "old_lease_token", old)
			a.cancel(errSuperseded)
		}
	}
	w.newest[d.JobID] = d.LeaseToken
	_, canceled := w.canceled[d.LeaseToken]
	delete(w.canceled, d.LeaseToken)
	if canceled || release {
		w.mu.Unlock()
		now := time.Now()
		r := wire.Result{JobID: d.JobID, LeaseToken: d.LeaseToken, WorkerID: w.cfg.ID, Attempt: d.Attempt,
			Outcome: wire.OutcomeReleased, Reason: "shutdown", StartedAt: now, FinishedAt: now}
		if canceled { // canceled before it started: it never runs
			r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonCanceled, "canceled before it started"
		}
		w.report(r, label)
		return
	}
	// The attempt's context is its own, not ctx: it outlives the receive
	// loop, and only its cancel causes end it.
	actx, cancel := context.WithCancelCause(context.Background())
	a := &attempt{jobID: d.JobID, cancel: cancel}
	w.running[d.LeaseToken] = a
	w.mu.Unlock()
	slot := w.slots.ask() // here, not in the goroutine: in delivery order
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer cancel(nil)
		// A prefetched job waits here for a slot; a cancel, a newer lease
		// or the shutdown ends the wait and it never runs.
		select {
		case <-slot:
		case <-actx.Done():
		}
		if actx.Err() != nil { // also when both were ready at once
			w.slots.withdraw(slot)
			w.report(notStarted(w.cfg.ID, d, context.Cause(actx)), label)
			return
		}
		defer w.slots.release()
		w.mu.Lock()
		a.started, a.startedAt = true, time.Now()
		w.mu.Unlock()
		// The time limit counts from the handler's start, not the delivery.
		ctx := actx
		if d.TimeoutSeconds > 0 {
			var stop context.CancelFunc
			ctx, stop = context.WithTimeoutCause(actx, time.Duration(d.TimeoutSeconds)*time.Second, errTimeout)
			defer stop()
		}
		ctx, end := traceAttempt(ctx, &d)
		r := w.execute(ctx, h, d)
		if end != nil {
			end(&r)
		}
		w.report(r, label)
	}()
}

// notStarted is the result of an attempt that ended, for cause, while it
// waited for a slot: handed back (shutdown, a newer lease), or failed if
// it was canceled.
func notStarted(workerID string, d wire.Delivery, cause error) wire.Result {
	now := time.Now()
	r := wire.Result{JobID: d.JobID, LeaseToken: d.LeaseToken, WorkerID: workerID, Attempt: d.Attempt,
		Outcome: wire.OutcomeReleased, Reason: "shutdown", Error: "worker shut down", StartedAt: now, FinishedAt: now}
	switch {
	case errors.Is(cause, errCanceled):
		r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, job.ReasonCanceled, "canceled before it started"
	case errors.Is(cause, errSuperseded):
		r.Reason, r.Error = "superseded", errSuperseded.Error()
	}
	return r
}
