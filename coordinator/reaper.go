package coordinator

import (
	"context"
	"time"

	"github.com/dtsched/dts/coordinator/internal/registry"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// reaperStore is what the reaper writes: reclaims and releases of the
// leases it recorded, and the workers table.
type reaperStore interface {
	JobReclaimLeases(ctx context.Context, epoch int64, ls []store.Release, policy store.RetryPolicy) ([]store.FailOutcome, error)
	JobReclaimExpired(ctx context.Context, epoch int64, spare []string, policy store.RetryPolicy) ([]store.FailOutcome, error)
	JobReleaseMany(ctx context.Context, epoch int64, rs []store.Release) ([]int64, error)
	WorkerDelete(ctx context.Context, epoch int64, id string) error
}

// reaperQueue is where it removes the deliveries of reclaimed leases.
type reaperQueue interface {
	RemoveDeliveries(ctx context.Context, workerID string, tokens []int64) (int, error)
	ResultsUnappliedBy(ctx context.Context, at time.Time) (bool, error)
	DropWorkerQueues(ctx context.Context, workerID string) error
	PushDead(ctx context.Context, es []wire.DeadEntry) error
}

// reaper reclaims the leases of workers gone silent (at once, without
// backoff), releases what a cleanly stopped worker left leased (once the
// results it sent before it stopped are applied; its leases are not
// reclaimed as run out meanwhile), and reclaims leases that ran out.
//
// It judges nobody unless the heartbeat reader has caught up recently
// (liveness): a leader that was paused, or whose reader is blocked in Redis
// or PostgreSQL, would otherwise take its own delay for the workers'
// silence. Nor while the result applier has results in hand
// (leaderState.resultsHeld), or from a result write PostgreSQL did not take
// until the applier has caught up (leaderState.resultsStuck): a worker names a
// job in its heartbeats only until it sends its result, so a lease that ran
// out, or a worker that went silent, may have a result in the applier's
// hands. Silence is measured on the clock heartbeats are timed with (the
// horizon, Redis's), and a reclaim acts only on the (job, token, worker)
// triples the registry recorded for that worker when it became unavailable.
// Every reclaim is fenced by the epoch in its own transaction, which is how
// leadership is confirmed before it.
type reaper struct {
	base
	startstop.Loop
	store reaperStore
	queue reaperQueue
	retry store.RetryPolicy
	// expiredAt is when the last scan for leases that ran out was made.
	expiredAt time.Time
}

// expiredEvery is how often the reaper scans PostgreSQL for leases that
// ran out: a tenth of the lease, at least every tick. Workers gone silent
// are judged every tick from the registry (memory); a lease runs out only
// when its heartbeats stopped extending it, and is retried then anyway, so
// a tenth of the lease late costs nothing that matters, while the scan
// reads every leased row, a cost that grows with the slots busy.
func (r *reaper) expiredEvery() time.Duration {
	return max(r.cfg.LeaseDuration/10, r.cfg.HeartbeatInterval/4)
}

// Start starts reaping, every heartbeat interval / 4 (leases that ran
// out: expiredEvery); Stop stops it.
func (r *reaper) Start(ctx context.Context) error {
	r.StartLoop(ctx, r.run)
	return nil
}

func (r *reaper) run(ctx context.Context) {
	t := time.NewTicker(r.cfg.HeartbeatInterval / 4)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.tick(ctx)
	}
}

// maxHeartbeatLag is how long ago the heartbeat reader may last have
// caught up for the reaper to trust its view: one interval of blocking read
// plus one of slack.
func (r *reaper) maxHeartbeatLag() time.Duration { return 2 * r.cfg.HeartbeatInterval }

// stopGrace is how long after a worker's stopped heartbeat its leftover
// leases are released at the earliest: its last results, sent before that
// heartbeat, are applied first in the common case, without a look at the
// results stream (releaseStopped waits for them in any case).
func (r *reaper) stopGrace() time.Duration { return 2 * r.cfg.HeartbeatInterval }

// tick runs one round.
func (r *reaper) tick(ctx context.Context) {
	horizon, ok := r.l.live.fresh(r.now(), r.maxHeartbeatLag())
	if !ok {
		r.metrics.reaperSkipped.Inc()
		return // behind, or blind: cannot tell a dead worker from our own delay
	}
	// Results the applier has in hand may end any lease: wait for it to
	// let go of them (a round at most), and keep it waiting while judging.
	if !r.l.holdResults(ctx, r.cfg.HeartbeatInterval/4) {
		r.metrics.reaperSkipped.Inc()
		return
	}
	defer r.l.releaseResults()
	if r.l.resultsStuck.Load() {
		r.metrics.reaperSkipped.Inc()
		return // results not yet written, left in the stream
	}
	// A stopped worker's leftover leases are its release's, not lease
	// expiry's: they are spared below until they are released. (A lease
	// it did not extend may run out while its worker's last results wait
	// in the stream; reclaimed, a completed job would run again.)
	var stopped []string
	for _, s := range r.l.workers.Stops() {
		if !s.At.Before(horizon.Add(-r.stopGrace())) || !r.releaseStopped(ctx, s) {
			stopped = append(stopped, s.ID)
		}
	}
	for _, w := range r.l.workers.Expire(horizon) {
		r.reclaimWorker(ctx, w)
	}
	if r.now().Sub(r.expiredAt) < r.expiredEvery() {
		return
	}
	r.expiredAt = r.now()
	// A live worker whose reported leases have not been extended lately
	// (the reader read nothing of it since a stall of ours) is spared: its
	// leases may have run out only because we could not extend them.
	spare := append(r.l.workers.Unextended(r.now().Add(-r.maxHeartbeatLag())), stopped...)
	outs, err := r.store.JobReclaimExpired(ctx, r.l.epoch, spare, r.retry)
	if err != nil {
		r.storeError(ctx, storeOpReclaimExpired, err)
		return
	}
	r.metrics.leaseTimeouts.Add(float64(len(outs)))
	r.metrics.jobsTotal.WithLabelValues("timeout").Add(float64(len(outs)))
	r.afterReclaim(ctx, outs, job.ReasonLeaseTimeout)
}

// reclaimWorker reclaims the leases a worker held when it became
// unavailable and removes their deliveries from its list.
func (r *reaper) reclaimWorker(ctx context.Context, w registry.Expired) {
	r.log.WarnContext(ctx, "worker unavailable: missed heartbeats; reclaiming its leases", "worker_id", w.ID, "leases", len(w.Leases))
	if len(w.Leases) == 0 {
		return
	}
	ls := make([]store.Release, len(w.Leases))
	tokens := make([]int64, len(w.Leases))
	for i, x := range w.Leases {
		ls[i] = store.Release{ID: x.JobID, LeaseToken: x.Token, WorkerID: w.ID}
		tokens[i] = x.Token
	}
	outs, err := r.store.JobReclaimLeases(ctx, r.l.epoch, ls, r.retry)
	if err != nil {
		r.storeError(ctx, storeOpReclaimWorker, err)
		return // its leases expire and are reclaimed by lease_timeout
	}
	for _, x := range w.Leases {
		r.l.workers.Done(x.JobID, x.Token) // applied, or already ended
	}
	r.afterReclaim(ctx, outs, job.ReasonWorkerFailure)
	if _, err := r.queue.RemoveDeliveries(ctx, w.ID, tokens); err != nil {
		r.redisError(ctx, redisOpRemoveDeliveries, err)
	}
}

// releaseStopped hands back the leases a cleanly stopped worker still
// holds (jobs delivered after it stopped reading its list) and forgets it;
// it reports whether it did. It waits (does nothing; the next tick tries
// again) while results that reached Redis before the worker's stopped
// heartbeat are not applied: a release first would hand back a job the
// worker has finished, run it again and reject the finished attempt's
// result as stale.
func (r *reaper) releaseStopped(ctx context.Context, s registry.Stop) bool {
	id := s.ID
	unapplied, err := r.queue.ResultsUnappliedBy(ctx, s.At)
	if err != nil {
		r.redisError(ctx, redisOpResultsRead, err)
		return false
	}
	if unapplied {
		return false
	}
	held := r.l.workers.Leases(id)
	rs := make([]store.Release, len(held))
	for i, x := range held {
		rs[i] = store.Release{ID: x.JobID, LeaseToken: x.Token, WorkerID: id}
	}
	released, err := r.store.JobReleaseMany(ctx, r.l.epoch, rs)
	if err != nil {
		r.storeError(ctx, storeOpReleaseWorker, err)
		return false
	}
	r.l.workers.Forget(id) // it left on purpose: not a worker down
	if err := r.store.WorkerDelete(ctx, r.l.epoch, id); err != nil {
		r.storeError(ctx, storeOpSyncWorkers, err)
	}
	if err := r.queue.DropWorkerQueues(ctx, id); err != nil {
		r.redisError(ctx, redisOpDropWorkerQueues, err)
	}
	r.metrics.reclaimed.WithLabelValues("worker_stopped").Add(float64(len(released)))
	r.log.InfoContext(ctx, "worker stopped; released the jobs it left leased", "worker_id", id, "released", len(released), "job_ids", released)
	r.l.wake()
	return true
}

func (r *reaper) afterReclaim(ctx context.Context, outs []store.FailOutcome, reason string) {
	if len(outs) == 0 {
		return
	}
	for _, o := range outs {
		r.l.workers.Done(o.ID, o.LeaseToken)
		r.log.WarnContext(ctx, "lease reclaimed", "job_id", o.ID, "attempt", o.Attempts, "worker_id", o.WorkerID, "reason", reason, "next_state", o.State)
	}
	r.metrics.reclaimed.WithLabelValues(reason).Add(float64(len(outs)))
	afterFailures(ctx, &r.base, r.queue, outs)
	r.l.wake()
}
