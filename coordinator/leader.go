package coordinator

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/store"
)

// elect stands by until it wins the leader lease, leads until it loses it
// or ctx ends, and repeats. Leadership is a lease in PostgreSQL with a
// time limit (store.LeaderAcquire): a standby takes over within
// LeaderTTL + ElectionInterval of the leader's last renewal, whether the
// leader died, froze or lost PostgreSQL.
func (c *Coordinator) elect(ctx context.Context) error {
	t := time.NewTicker(c.cfg.ElectionInterval)
	defer t.Stop()
	for {
		epoch, err := c.store.LeaderAcquire(ctx, c.cfg.ID, c.cfg.LeaderTTL)
		if err != nil && ctx.Err() == nil {
			c.metrics.countStoreError(storeOpElect)
			c.log.WarnContext(ctx, "leader election failed", "error", err)
		}
		if epoch > 0 {
			c.lead(ctx, epoch)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// lead runs the leader's services until leadership is lost or ctx ends.
func (c *Coordinator) lead(ctx context.Context, epoch int64) {
	acquired := time.Now()
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := newLeaderState(epoch, c.cfg.workerDeadline())
	c.log.InfoContext(ctx, "became leader", "epoch", epoch)
	c.metrics.leaderChanges.Inc()
	c.metrics.isLeader.Set(1)
	c.metrics.leaderEpoch.Set(float64(epoch))
	c.epoch.Store(epoch)
	defer c.metrics.isLeader.Set(0)

	// Start from what PostgreSQL says is leased, so slots are not
	// over-committed while the fleet's heartbeats arrive. Workers known
	// from leases count as alive, with no free slot, until the heartbeat
	// reader's first read gives every worker one deadline from then.
	leases, err := c.store.JobLeasesList(leadCtx)
	if err != nil {
		c.log.ErrorContext(ctx, "load leases; giving up leadership", "error", err)
		c.metrics.countStoreError(storeOpLoadLeases)
		c.resign(ctx, epoch)
		return
	}
	for _, ls := range leases {
		l.workers.Assigned(ls.WorkerID, ls.ID, ls.LeaseToken, acquired)
	}
	for _, w := range l.workers.Snapshot() {
		l.workers.Touch(w.ID, time.Time{})
	}
	c.mu.Lock()
	c.leading = l
	c.mu.Unlock()

	services := c.leaderServices(l)
	_ = startstop.StartAll(leadCtx, services...) // none of them fails to start
	c.holdLease(leadCtx, l)
	// Producers before consumers: the dispatcher first, the heartbeat
	// reader (which keeps leases alive) last.
	startstop.StopAll(services...)
	c.mu.Lock()
	c.leading = nil
	c.mu.Unlock()
	if ctx.Err() != nil {
		c.resign(ctx, epoch) // a clean shutdown: let a standby take over at once
	}
	c.log.InfoContext(ctx, "stopped leading", "epoch", epoch)
}

// leaderServices builds the leader's services over this coordinator's
// store and queue, in the order lead stops them.
func (c *Coordinator) leaderServices(l *leaderState) []startstop.Service {
	b := base{cfg: c.cfg, log: c.log, metrics: c.metrics, l: l, now: time.Now}
	return []startstop.Service{
		&scheduler{base: b, store: c.store},
		&dispatcher{base: b, store: c.store, queue: c.queue},
		&resultApplier{base: b, store: c.store, queue: c.queue, retry: c.retryDelay,
			allowed: func(rs []queue.ReceivedResult) []queue.ReceivedResult { return c.filterUnregistered(l, rs) }},
		&reaper{base: b, store: c.store, queue: c.queue, retry: c.retryDelay},
		&maintainer{base: b, store: c.store, queue: c.queue},
		&heartbeatReader{base: b, store: c.store, queue: c.queue, allowed: c.workerAllowed},
	}
}

// holdLease renews the leader lease every election interval until ctx
// ends, a renewal finds that another coordinator took the lease, or a write
// finds the epoch superseded. A renewal that fails otherwise (PostgreSQL
// unreachable or slow) is tried again at the next tick: a standby may take
// over meanwhile, and every write this leader makes is fenced by its
// epoch, so going on cannot corrupt anything.
func (c *Coordinator) holdLease(ctx context.Context, l *leaderState) {
	t := time.NewTicker(c.cfg.ElectionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.deposed:
			c.log.WarnContext(ctx, "lost leadership: a write found the epoch superseded", "epoch", l.epoch)
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.LeaderTTL)
		err := c.store.LeaderRenew(rctx, l.epoch, c.cfg.LeaderTTL)
		cancel()
		switch {
		case err == nil:
		case store.IsDeposed(err):
			c.log.WarnContext(ctx, "lost leadership: another coordinator took the lease", "epoch", l.epoch)
			return
		case ctx.Err() == nil:
			c.metrics.countStoreError(storeOpRenewLease)
			c.log.WarnContext(ctx, "renewing the leader lease failed; trying again", "epoch", l.epoch, "error", err)
		}
	}
}

// resign ends the lease at once (best effort).
func (c *Coordinator) resign(ctx context.Context, epoch int64) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := c.store.LeaderResign(rctx, epoch); err != nil {
		c.log.WarnContext(ctx, "giving up the leader lease failed; a standby takes over when it runs out", "error", err)
	}
}

// retryDelay is the retry policy handed to the store: backoff with jitter.
func (c *Coordinator) retryDelay(attempt int) time.Duration {
	return c.cfg.Backoff.Delay(attempt, rand.Float64())
}
