package coordinator

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// heartbeatLoop reads the heartbeat stream: it registers workers, records
// when each was last heard (on this coordinator's clock), and extends the
// leases of the jobs they report running, one statement per read.
func (c *Coordinator) heartbeatLoop(ctx context.Context, l *leaderState) {
	after := ""
	for ctx.Err() == nil {
		if after == "" {
			id, err := c.queue.LastHeartbeatID(ctx)
			if err != nil {
				c.redisError(ctx, "heartbeat_read", err)
				continue
			}
			after = id
		}
		hbs, last, bad, err := c.queue.ReadHeartbeats(ctx, after, 1000, c.cfg.HeartbeatInterval)
		if err != nil {
			l.heartbeatsBlind.Store(true)
			c.redisError(ctx, "heartbeat_read", err)
			continue
		}
		if l.heartbeatsBlind.Load() {
			// Reading again: give every worker a fresh deadline before
			// judging its silence, which was ours as much as its.
			l.workers.TouchAll(time.Now())
			l.heartbeatsBlind.Store(false)
		}
		after = last
		if bad > 0 {
			c.metrics.badMessages.WithLabelValues("heartbeats").Add(float64(bad))
		}
		now := time.Now()
		var ext store.LeaseExtendParams
		for _, rh := range hbs {
			hb := rh.Heartbeat
			if !c.workerAllowed(ctx, hb) { // credentials (auth.go); before "stopped" too
				continue
			}
			if hb.Stopped {
				// Its last results may still be on their way through the
				// results stream: the reaper releases what it left leased
				// a little later (stopGrace).
				l.workers.Stopped(hb.WorkerID, now)
				c.log.Info("worker said it stopped", "worker_id", hb.WorkerID)
				continue
			}
			if l.workers.Heartbeat(hb, now) {
				c.log.Info("worker joined", "worker_id", hb.WorkerID, "concurrency", hb.Concurrency, "job_types", hb.JobTypes)
				l.wake()
			}
			for _, f := range hb.InFlight {
				ext.IDs, ext.Tokens = append(ext.IDs, f.JobID), append(ext.Tokens, f.LeaseToken)
			}
		}
		if len(ext.IDs) > 0 {
			ext.Lease = c.cfg.LeaseDuration
			if _, err := c.store.JobLeaseExtend(ctx, ext); err != nil {
				c.storeError(ctx, "lease_extend", err)
			}
		}
	}
}

// releaseStoppedWorker hands back the leases of a worker that exited
// cleanly: jobs delivered after it stopped reading its list.
// stopGrace is how long after a worker's stopped heartbeat its leftover
// leases are released: long enough for its last results, sent before that
// heartbeat, to be applied by the result loop first.
func (c *Coordinator) stopGrace() time.Duration { return 2 * c.cfg.HeartbeatInterval }

func (c *Coordinator) releaseStoppedWorker(ctx context.Context, l *leaderState, id string) {
	released, err := c.store.JobReleaseWorker(ctx, id)
	if err != nil {
		c.storeError(ctx, "release_worker", err)
		return
	}
	ids := make([]int64, len(released))
	for i, r := range released {
		ids[i] = r.ID
	}
	l.workers.Forget(id) // it left on purpose: not a worker down
	if err := c.store.WorkerDelete(ctx, id); err != nil {
		c.storeError(ctx, "sync_workers", err)
	}
	if err := c.queue.DropWorkerQueues(ctx, id); err != nil {
		c.redisError(ctx, "drop_worker_queues", err)
	}
	c.metrics.reclaimed.WithLabelValues("worker_stopped").Add(float64(len(released)))
	c.log.Info("worker stopped; released the jobs it left leased", "worker_id", id, "released", len(released), "job_ids", ids)
	l.wake()
}

// dispatchLoop leases due jobs to free slots whenever something may have
// changed: a submit's wake-up, a freed slot, a new worker, or the poll timer
// (which is how retries and scheduled jobs come due).
func (c *Coordinator) dispatchLoop(ctx context.Context, l *leaderState) {
	wake, stop := c.queue.SubscribeWake(ctx)
	defer stop()
	t := time.NewTicker(c.cfg.PollInterval)
	defer t.Stop()
	for ctx.Err() == nil {
		more, err := c.dispatch(ctx, l)
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		if more {
			continue
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-l.kick:
		case <-t.C:
		}
	}
}

// dispatch runs one round: for each group of free slots, one claim statement
// and one pipelined delivery. It reports whether every slot was filled (so
// more due jobs may be waiting).
func (c *Coordinator) dispatch(ctx context.Context, l *leaderState) (more bool, err error) {
	if l.claimSize == 0 {
		l.claimSize = min(minClaimSize, c.cfg.ClaimBatch)
	}
	groups := l.workers.Slots(l.claimSize)
	offered, total := 0, 0
	for _, g := range groups {
		offered += len(g.Slots)
	}
	defer func() {
		if err == nil {
			l.claimSize = nextClaimSize(l.claimSize, offered, total, more, c.cfg.ClaimBatch)
		}
	}()
	for _, g := range groups {
		t0 := time.Now()
		claimed, err := c.store.JobClaimBatch(ctx, store.JobClaimParams{Types: g.Types, Slots: g.Slots, Lease: c.cfg.LeaseDuration})
		c.metrics.dispatchStep.WithLabelValues("claim").Observe(time.Since(t0).Seconds())
		if err != nil {
			c.storeError(ctx, "claim", err)
			return false, err
		}
		c.metrics.claimBatch.Observe(float64(len(claimed)))
		total += len(claimed)
		if len(claimed) == 0 {
			continue
		}
		// A worker may have been declared dead between Slots and the
		// claim's commit; its reclaim may already have run and missed
		// these leases. Give them back now instead of waiting for the
		// lease to run out. (If it is declared dead after this check, its
		// reclaim runs after the claim committed and takes them.)
		claimed = c.dropGone(ctx, l, claimed)
		if len(claimed) == 0 {
			continue
		}
		now := time.Now()
		byWorker := map[string][]wire.Delivery{}
		debug := c.log.Enabled(ctx, slog.LevelDebug)
		for _, j := range claimed {
			// Record the lease before delivering, so a result that comes
			// back at once finds it.
			l.workers.Assigned(j.WorkerID, j.ID, j.LeaseToken, now)
			if debug {
				c.log.Debug("job leased", "job_id", j.ID, "worker_id", j.WorkerID, "attempt", j.Attempt, "lease_token", j.LeaseToken)
			}
			byWorker[j.WorkerID] = append(byWorker[j.WorkerID], wire.Delivery{
				JobID: j.ID, Name: j.Name, Queue: j.Queue, Payload: j.Payload, Attempt: j.Attempt,
				MaxRetries: j.MaxRetries, TimeoutSeconds: j.TimeoutSeconds, LeaseToken: j.LeaseToken, CreatedAt: j.CreatedAt,
			})
		}
		t0 = time.Now()
		err = c.queue.Deliver(ctx, byWorker)
		c.metrics.dispatchStep.WithLabelValues("deliver").Observe(time.Since(t0).Seconds())
		if err != nil {
			c.redisError(ctx, "deliver", err)
			c.undeliver(ctx, l, claimed)
			return false, err
		}
		for _, j := range claimed {
			c.metrics.dispatched.WithLabelValues(c.typeLabel(l, j.Name)).Inc()
		}
		if len(claimed) == len(g.Slots) {
			more = true
		}
	}
	return more, nil
}

// minClaimSize is the fewest slots a dispatch round offers while jobs come
// in a trickle.
const minClaimSize = 32

// nextClaimSize sizes the next round's offer of slots from this round's:
// eight times larger after a round in which some group's claim filled the
// slots it was offered (a backlog: 32, 256, then the claim batch), four
// times what was claimed (at least minClaimSize) after a round that found
// fewer due jobs than slots, and unchanged after a round with no free slot
// to offer. Offering the whole claim batch every round would send, and have
// PostgreSQL decode, a thousand worker ids per claim while jobs arrive one
// or two at a time: that was a tenth of the coordinator's CPU at 1,000
// single submits a second.
func nextClaimSize(size, offered, claimed int, filled bool, limit int) int {
	switch {
	case offered == 0:
		return size
	case filled:
		return min(limit, 8*size)
	default:
		return min(limit, max(4*claimed, minClaimSize))
	}
}

// dropGone releases the claimed jobs whose worker is no longer usable and
// returns the rest.
func (c *Coordinator) dropGone(ctx context.Context, l *leaderState, claimed []store.Claimed) []store.Claimed {
	keep, gone := claimed[:0:0], []store.Claimed(nil)
	for _, j := range claimed {
		if l.workers.Usable(j.WorkerID) {
			keep = append(keep, j)
		} else {
			gone = append(gone, j)
		}
	}
	if len(gone) > 0 {
		c.undeliver(ctx, l, gone)
	}
	return keep
}

// undeliver gives back jobs that were leased but could not be delivered;
// the attempt does not count. If even that fails their leases expire.
func (c *Coordinator) undeliver(ctx context.Context, l *leaderState, claimed []store.Claimed) {
	rs := make([]store.Release, len(claimed))
	for i, j := range claimed {
		rs[i] = store.Release{ID: j.ID, LeaseToken: j.LeaseToken}
	}
	if _, err := c.store.JobReleaseMany(context.WithoutCancel(ctx), rs); err != nil {
		c.storeError(ctx, "release", err)
		return
	}
	for _, j := range claimed {
		l.workers.Done(j.ID, j.LeaseToken)
	}
	c.metrics.reclaimed.WithLabelValues("delivery_failed").Add(float64(len(claimed)))
}

// typeLabel bounds the job-type label of metrics to types workers name.
func (c *Coordinator) typeLabel(l *leaderState, name string) string {
	if l.workers.KnownType(name) {
		return name
	}
	return "other"
}

// resultLoop applies results from the results stream in batches. It first
// re-reads results read earlier but never acknowledged (a crash, or the
// previous leader's), then new ones. A batch is acknowledged only after
// PostgreSQL committed it; on failure it is read again.
func (c *Coordinator) resultLoop(ctx context.Context, l *leaderState) {
	if err := c.queue.EnsureResultsGroup(ctx); err != nil {
		c.redisError(ctx, "results_group", err)
	}
	pending := true
	for ctx.Err() == nil {
		rs, bad, err := c.queue.ReadResults(ctx, pending, c.cfg.ResultBatch, c.cfg.HeartbeatInterval)
		if err != nil {
			c.redisError(ctx, "results_read", err)
			pending = true
			continue
		}
		if pending && len(rs) == 0 && len(bad) == 0 {
			pending = false
			continue
		}
		if len(bad) > 0 {
			c.metrics.badMessages.WithLabelValues("results").Add(float64(len(bad)))
			c.log.Warn("dropping undecodable results", "count", len(bad))
		}
		if len(rs) > 0 {
			if err := c.applyResults(ctx, l, rs); err != nil {
				c.storeError(ctx, "apply_results", err)
				pending = true // not acknowledged: read them again
				sleepCtx(ctx, 200*time.Millisecond)
				continue
			}
		}
		ids := append(make([]string, 0, len(rs)+len(bad)), bad...)
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		if err := c.queue.AckResults(ctx, ids); err != nil {
			// Applied but not acknowledged: they come back as stale.
			c.redisError(ctx, "results_ack", err)
		}
	}
}

// applyResults records one batch of outcomes: completions in one statement,
// failures in one transaction, releases in one statement.
func (c *Coordinator) applyResults(ctx context.Context, l *leaderState, rs []queue.ReceivedResult) error {
	rs = c.filterUnregistered(l, rs) // dropped ones are still acknowledged by resultLoop (auth.go)
	c.metrics.resultBatch.Observe(float64(len(rs)))
	var (
		completions []store.Completion
		failures    []store.Failure
		releases    []store.Release
	)
	byID := make(map[int64]wire.Result, len(rs))
	for _, rr := range rs {
		r := rr.Result
		byID[r.JobID] = r
		switch r.Outcome {
		case wire.OutcomeCompleted:
			completions = append(completions, store.Completion{ID: r.JobID, LeaseToken: r.LeaseToken, Result: r.Result,
				StartedAt: r.StartedAt})
		case wire.OutcomeFailed:
			reason := r.Reason
			if reason == "" {
				reason = job.ReasonError
			}
			failures = append(failures, store.Failure{ID: r.JobID, LeaseToken: r.LeaseToken, Error: r.Error,
				Reason: reason, Permanent: reason == job.ReasonPermanent, StartedAt: r.StartedAt})
		case wire.OutcomeReleased:
			releases = append(releases, store.Release{ID: r.JobID, LeaseToken: r.LeaseToken})
		}
	}
	done, err := c.store.JobCompleteMany(ctx, completions)
	if err != nil {
		return err
	}
	failed, err := c.store.JobFailMany(ctx, failures, c.retryDelay)
	if err != nil {
		return err
	}
	released, err := c.store.JobReleaseMany(ctx, releases)
	if err != nil {
		return err
	}
	applied := len(done) + len(failed) + len(released)
	if stale := len(rs) - applied; stale > 0 {
		c.metrics.staleResults.Add(float64(stale))
		c.logStale(rs, done, failed, released)
	}
	for _, rr := range rs {
		l.workers.Done(rr.Result.JobID, rr.Result.LeaseToken)
	}
	debug := c.log.Enabled(ctx, slog.LevelDebug)
	for _, f := range done {
		r := byID[f.ID]
		if debug {
			c.log.Debug("job completed", "job_id", f.ID, "worker_id", r.WorkerID, "attempt", r.Attempt)
		}
		name := c.typeLabel(l, f.Name)
		c.metrics.jobsTotal.WithLabelValues("completed").Inc()
		c.metrics.attempts.WithLabelValues(name, "succeeded").Inc()
		c.observeAttempt(name, r, f.CreatedAt)
		c.metrics.endToEnd.WithLabelValues(name).Observe(r.FinishedAt.Sub(f.CreatedAt).Seconds())
	}
	for _, o := range failed {
		r := byID[o.ID]
		name := c.typeLabel(l, o.Name)
		c.metrics.attempts.WithLabelValues(name, "failed").Inc()
		c.observeAttempt(name, r, o.CreatedAt)
		if r.Reason == job.ReasonTimeout {
			c.metrics.jobsTotal.WithLabelValues("timeout").Inc()
		}
		c.log.Info("attempt failed", "job_id", o.ID, "attempt", o.Attempts, "worker_id", r.WorkerID,
			"reason", r.Reason, "error", o.Error, "next_state", o.State, "retry_in_ms", o.Delay.Milliseconds())
	}
	for range released {
		c.metrics.attempts.WithLabelValues("other", "released").Inc()
	}
	c.afterFailures(ctx, failed)
	if applied > 0 {
		l.wake()
	}
	return nil
}

// logStale logs each result that was rejected because its lease was gone.
func (c *Coordinator) logStale(rs []queue.ReceivedResult, done []store.Finished, failed []store.FailOutcome, released []int64) {
	applied := make(map[int64]bool, len(done)+len(failed)+len(released))
	for _, f := range done {
		applied[f.ID] = true
	}
	for _, o := range failed {
		applied[o.ID] = true
	}
	for _, id := range released {
		applied[id] = true
	}
	for _, rr := range rs {
		if r := rr.Result; !applied[r.JobID] {
			c.log.Info("rejected a stale result: its lease is gone", "job_id", r.JobID, "worker_id", r.WorkerID,
				"attempt", r.Attempt, "lease_token", r.LeaseToken, "outcome", r.Outcome)
		}
	}
}

// observeAttempt records an attempt's run time and, for a first attempt, its
// queue wait.
func (c *Coordinator) observeAttempt(name string, r wire.Result, created time.Time) {
	if !r.StartedAt.IsZero() && !r.FinishedAt.IsZero() {
		c.metrics.processing.WithLabelValues(name).Observe(r.FinishedAt.Sub(r.StartedAt).Seconds())
		if r.Attempt == 1 {
			c.metrics.queueWait.WithLabelValues(name).Observe(max(r.StartedAt.Sub(created).Seconds(), 0))
		}
	}
}

// afterFailures updates retry metrics and pushes dead jobs to the Redis
// dead-letter list (best effort: the mirror check repairs a miss).
func (c *Coordinator) afterFailures(ctx context.Context, outs []store.FailOutcome) {
	var dead []wire.DeadEntry
	for _, o := range outs {
		switch o.State {
		case job.StateFailed:
			c.metrics.jobsTotal.WithLabelValues("failed").Inc()
			c.metrics.deadLettered.Inc()
			c.metrics.retryAttempts.WithLabelValues(o.Reason).Observe(float64(o.Attempts))
			dead = append(dead, deadEntry(o.ID, o.Name, o.Queue, o.Payload, o.Attempts, o.MaxRetries, o.Error, o.Reason, o.Errors, o.CreatedAt, time.Now()))
			c.log.Warn("job moved to the dead-letter queue", "job_id", o.ID, "worker_id", o.WorkerID, "attempt", o.Attempts, "reason", o.Reason)
		case job.StateRetrying:
			c.metrics.retryAttempts.WithLabelValues(retryReason(o.Reason)).Observe(float64(o.Attempts))
		}
	}
	if err := c.queue.PushDead(ctx, dead); err != nil {
		c.redisError(ctx, "dlq_push", err)
	}
}

// retryReason maps an attempt's reason to the job_retry_attempts label.
func retryReason(reason string) string {
	switch reason {
	case job.ReasonWorkerFailure, job.ReasonLeaseTimeout, job.ReasonTimeout:
		return reason
	}
	return "job_error"
}

func deadEntry(id int64, name, queue string, payload json.RawMessage, attempts, maxRetries int, lastErr, reason string,
	errs json.RawMessage, created, failedAt time.Time) wire.DeadEntry {
	return wire.DeadEntry{
		JobID: id, Reason: reason, Errors: errs, FailedAt: failedAt,
		OriginalJob: wire.DeadJob{JobID: id, Name: name, Queue: queue, Payload: payload, Attempts: attempts,
			MaxRetries: maxRetries, LastError: lastErr, CreatedAt: created},
	}
}

// reapLoop reclaims the leases of workers gone silent (at once, without
// backoff) and leases that ran out.
func (c *Coordinator) reapLoop(ctx context.Context, l *leaderState) {
	t := time.NewTicker(c.cfg.HeartbeatInterval / 4)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for _, id := range l.workers.StoppedBefore(now.Add(-c.stopGrace())) {
			c.releaseStoppedWorker(ctx, l, id)
		}
		if l.heartbeatsBlind.Load() {
			continue // cannot tell a dead worker from our own blindness
		}
		for _, id := range l.workers.Expire(now) {
			c.log.Warn("worker unavailable: missed heartbeats; reclaiming its leases", "worker_id", id)
			for {
				outs, err := c.store.JobReclaimWorker(ctx, id, c.retryDelay)
				if err != nil {
					c.storeError(ctx, "reclaim_worker", err)
					break
				}
				c.afterReclaim(ctx, l, outs, job.ReasonWorkerFailure)
				if len(outs) < 1000 {
					break
				}
			}
			l.workers.ForgetLeases(id)
			if err := c.queue.DropWorkerQueues(ctx, id); err != nil {
				c.redisError(ctx, "drop_worker_queues", err)
			}
		}
		outs, err := c.store.JobReclaimExpired(ctx, c.retryDelay)
		if err != nil {
			c.storeError(ctx, "reclaim_expired", err)
			continue
		}
		c.metrics.leaseTimeouts.Add(float64(len(outs)))
		c.metrics.jobsTotal.WithLabelValues("timeout").Add(float64(len(outs)))
		c.afterReclaim(ctx, l, outs, job.ReasonLeaseTimeout)
	}
}

func (c *Coordinator) afterReclaim(ctx context.Context, l *leaderState, outs []store.FailOutcome, reason string) {
	if len(outs) == 0 {
		return
	}
	for _, o := range outs {
		l.workers.Done(o.ID, o.LeaseToken)
		c.log.Warn("lease reclaimed", "job_id", o.ID, "attempt", o.Attempts, "worker_id", o.WorkerID, "reason", reason, "next_state", o.State)
	}
	c.metrics.reclaimed.WithLabelValues(reason).Add(float64(len(outs)))
	c.afterFailures(ctx, outs)
	l.wake()
}

// maintenanceLoop records the fleet in PostgreSQL every heartbeat interval,
// keeps the Redis dead-letter list equal to PostgreSQL's failed jobs, and
// deletes finished jobs past their retention.
func (c *Coordinator) maintenanceLoop(ctx context.Context, l *leaderState) {
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	var lastClean, lastMirror time.Time
	for ctx.Err() == nil {
		now := time.Now()
		c.syncWorkers(ctx, l)
		if now.Sub(lastMirror) >= c.cfg.DeadMirrorInterval {
			lastMirror = now
			c.mirrorDead(ctx)
		}
		if now.Sub(lastClean) >= c.cfg.CleanupInterval {
			lastClean = now
			if _, err := c.store.WorkerCleanup(ctx, c.cfg.RetentionCompleted); err != nil {
				c.storeError(ctx, "cleanup", err)
			}
			n, err := c.store.JobCleanup(ctx, c.cfg.RetentionCompleted, c.cfg.RetentionFailed, 5000)
			if err != nil {
				c.storeError(ctx, "cleanup", err)
			} else if n > 0 {
				c.metrics.cleaned.Add(float64(n))
				c.log.Info("retention cleaner deleted finished jobs", "count", n)
			}
		}
		l.workers.Remove(now, time.Hour)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

func (c *Coordinator) syncWorkers(ctx context.Context, l *leaderState) {
	snap := l.workers.Snapshot()
	rows := make([]store.WorkerRow, 0, len(snap))
	for _, w := range snap {
		row := store.WorkerRow{ID: w.ID, JobTypes: w.Types, Concurrency: w.Concurrency, State: w.State(),
			InFlight: len(w.InFlight), LastHeartbeatAt: w.LastSeen}
		if !w.LastAssignedAt.IsZero() {
			at := w.LastAssignedAt
			row.LastAssignedAt = &at
		}
		rows = append(rows, row)
	}
	if err := c.store.WorkerSync(ctx, rows); err != nil {
		c.storeError(ctx, "sync_workers", err)
	}
}

// maxDeadMirror bounds the Redis dead-letter list: the newest entries are
// mirrored; PostgreSQL (GET /dlq) has them all.
const maxDeadMirror = 100_000

// mirrorDead rebuilds the Redis dead-letter list from PostgreSQL when their
// lengths differ (after a Redis flush, a lost push, a requeue or retention).
func (c *Coordinator) mirrorDead(ctx context.Context) {
	want, err := c.store.JobCountState(ctx, job.StateFailed)
	if err != nil {
		c.storeError(ctx, "count_dead", err)
		return
	}
	have, err := c.queue.DeadLen(ctx)
	if err != nil {
		c.redisError(ctx, "dlq_len", err)
		return
	}
	if min(want, maxDeadMirror) == have {
		return
	}
	dead, err := c.store.DeadList(ctx, maxDeadMirror)
	if err != nil {
		c.storeError(ctx, "list_dead", err)
		return
	}
	es := make([]wire.DeadEntry, len(dead))
	for i, d := range dead {
		j := d.Job
		errs, _ := json.Marshal(j.Errors)
		failedAt := time.Now()
		if j.FinishedAt != nil {
			failedAt = *j.FinishedAt
		}
		es[i] = deadEntry(j.ID, j.Name, j.Queue, j.Payload, j.Attempts, j.MaxRetries, j.LastError, d.Reason, errs, j.CreatedAt, failedAt)
	}
	if err := c.queue.ReplaceDead(ctx, es); err != nil {
		c.redisError(ctx, "dlq_rebuild", err)
		return
	}
	c.metrics.deadMirrorRebuilds.Inc()
	c.log.Info("rebuilt the Redis dead-letter list from PostgreSQL", "entries", len(es), "had", have)
}

func (c *Coordinator) storeError(ctx context.Context, op string, err error) {
	if ctx.Err() != nil {
		return
	}
	c.metrics.storeErrors.WithLabelValues(op).Inc()
	c.log.Error("postgres operation failed", "op", op, "err", err)
}

func (c *Coordinator) redisError(ctx context.Context, op string, err error) {
	if ctx.Err() != nil {
		return
	}
	c.metrics.redisErrors.WithLabelValues(op).Inc()
	c.log.Error("redis operation failed", "op", op, "err", err)
	sleepCtx(ctx, 200*time.Millisecond)
}
