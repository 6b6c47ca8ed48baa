package coordinator

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dtsched/dts/coordinator/internal/registry"
	"github.com/dtsched/dts/internal/store"
)

// leaderState is what exists only while this coordinator leads.
type leaderState struct {
	epoch   int64
	workers *registry.Registry
	// kick wakes the dispatcher (new jobs, freed slots, new workers).
	kick chan struct{}
	// heartbeatsBlind is set while the heartbeat stream cannot be read:
	// workers are then not expired for their silence.
	heartbeatsBlind atomic.Bool
	// claimSize is how many slots the next dispatch round offers (see
	// nextClaimSize); only the dispatch loop uses it.
	claimSize int
}

func (l *leaderState) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// elect stands by until it wins the leader lock, leads until it loses it or
// ctx ends, and repeats.
func (c *Coordinator) elect(ctx context.Context) error {
	el := store.NewElector(c.cfg.DatabaseURL, c.cfg.ID)
	defer el.Release()
	t := time.NewTicker(c.cfg.ElectionInterval)
	defer t.Stop()
	for {
		epoch, err := el.TryAcquire(ctx)
		if err != nil && ctx.Err() == nil {
			c.metrics.storeErrors.WithLabelValues("elect").Inc()
			c.log.Warn("leader election failed", "err", err)
		}
		if epoch > 0 {
			c.lead(ctx, el, epoch)
			el.Release()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// lead runs the leader's loops until leadership is lost or ctx ends.
func (c *Coordinator) lead(ctx context.Context, el *store.Elector, epoch int64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := &leaderState{epoch: epoch, workers: registry.New(c.cfg.workerDeadline()), kick: make(chan struct{}, 1)}
	c.log.Info("became leader", "epoch", epoch)
	c.metrics.leaderChanges.Inc()
	c.metrics.isLeader.Set(1)
	c.metrics.leaderEpoch.Set(float64(epoch))
	c.epoch.Store(epoch)

	// Start from what PostgreSQL says is leased, so slots are not
	// over-committed while the fleet's heartbeats arrive.
	leases, err := c.store.JobLeasesList(ctx)
	if err != nil {
		c.log.Error("load leases; giving up leadership", "err", err)
		c.metrics.storeErrors.WithLabelValues("load_leases").Inc()
		c.metrics.isLeader.Set(0)
		return
	}
	now := time.Now()
	for _, ls := range leases {
		l.workers.Assigned(ls.WorkerID, ls.ID, ls.LeaseToken, now)
	}
	// Workers known from leases are unknown until they heartbeat; give them
	// one deadline from now before their leases are reclaimed.
	for _, w := range l.workers.Snapshot() {
		l.workers.Touch(w.ID, now)
	}
	c.mu.Lock()
	c.leading = l
	c.mu.Unlock()

	var wg sync.WaitGroup
	loops := []func(context.Context, *leaderState){c.heartbeatLoop, c.dispatchLoop, c.resultLoop, c.reapLoop, c.maintenanceLoop}
	for _, loop := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(ctx, l)
		}()
	}
	// Confirm leadership every interval; stop acting the moment it is gone.
	t := time.NewTicker(c.cfg.ElectionInterval)
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case <-t.C:
			cctx, ccancel := context.WithTimeout(ctx, c.cfg.ElectionInterval*3)
			if err := el.Check(cctx, epoch); err != nil {
				if ctx.Err() == nil {
					c.log.Warn("lost leadership", "epoch", epoch, "err", err)
				}
				running = false
			}
			ccancel()
		}
	}
	t.Stop()
	cancel()
	wg.Wait()
	c.mu.Lock()
	c.leading = nil
	c.mu.Unlock()
	c.metrics.isLeader.Set(0)
	c.log.Info("stopped leading", "epoch", epoch)
}

// retryDelay is the retry policy handed to the store: backoff with jitter.
func (c *Coordinator) retryDelay(attempt int) time.Duration {
	return c.cfg.Backoff.Delay(attempt, rand.Float64())
}
