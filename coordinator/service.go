package coordinator

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dtsched/dts/coordinator/internal/registry"
	"github.com/dtsched/dts/internal/retry"
	"github.com/dtsched/dts/internal/store"
)

// The leader's work is done by six small services, each one loop in its
// own file (a startstop.Service embedding a startstop.Loop), over narrow interfaces of the store and the
// queue: scheduler (scheduler.go), heartbeatReader (heartbeats.go), dispatcher (dispatch.go),
// resultApplier (results.go), reaper (reaper.go) and maintainer
// (maintenance.go). lead (leader.go) starts them when it wins the lease and
// stops them when it loses it. What they share is a leaderState.

// leaderState is what exists only while this coordinator leads, shared by
// the leader's services.
type leaderState struct {
	epoch   int64
	workers *registry.Registry
	// kick wakes the dispatcher (new jobs, freed slots, new workers).
	kick chan struct{}
	// live says how far the heartbeat reader has caught up (heartbeats.go).
	live liveness
	// slots says whether due jobs wait for free slots (slotState).
	slots slotState
	// resultsStuck is true from the moment a write of the result applier
	// fails for a reason other than its data (results.go, persist) until
	// the applier has caught up with the results stream. The results it
	// holds, and those queued behind them, may end leases that run out
	// meanwhile, whose workers name them no more, so the reaper judges
	// nobody until then.
	resultsStuck atomic.Bool
	// resultsHeld is held by the result applier from the moment a read
	// hands it results until they are written and acknowledged (or left
	// in the stream for another try), and by the reaper for each round
	// of judging: a lease whose result the applier has in hand is not
	// ended by the reaper, and a round that judged is not undone by a
	// write failing while it ran (holdResults). Capacity 1.
	resultsHeld chan struct{}
	// deposed is closed when a write found the epoch superseded: lead
	// then stops every service at once.
	deposed     chan struct{}
	deposedOnce sync.Once
	// traces holds the traceparents of traced leases until their results
	// are applied (trace.go).
	traces traceBook
}

func newLeaderState(epoch int64, deadline time.Duration) *leaderState {
	return &leaderState{epoch: epoch, workers: registry.New(deadline), kick: make(chan struct{}, 1),
		deposed: make(chan struct{}), slots: slotState{became: make(chan struct{}, 1)},
		resultsHeld: make(chan struct{}, 1)}
}

// holdResults takes resultsHeld, waiting up to within (for as long as ctx
// lasts if within is 0); it reports whether it took it. A waiter takes it
// as soon as its holder lets go, ahead of the holder's next try.
func (l *leaderState) holdResults(ctx context.Context, within time.Duration) bool {
	var timeout <-chan time.Time
	if within > 0 {
		t := time.NewTimer(within)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case l.resultsHeld <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	case <-timeout:
		return false
	}
}

func (l *leaderState) releaseResults() { <-l.resultsHeld }

func (l *leaderState) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *leaderState) depose() { l.deposedOnce.Do(func() { close(l.deposed) }) }

// slotState is the dispatcher's last word on whether due jobs wait for
// slots: bound is true after a round in which some group's claim filled
// every slot it was offered, or no slot was free, or the round failed. It
// is false after a round that found fewer due jobs than free slots. While
// it is false the result applier may linger a moment to apply several
// results in one statement (results.go, lingerFor); while it is true it
// applies each read at once, because an applied result is what frees a
// slot for a waiting job. became receives a value each time bound turns
// true, which ends a linger in progress.
type slotState struct {
	bound  atomic.Bool
	became chan struct{} // capacity 1
}

func (s *slotState) set(bound bool) {
	if !bound {
		s.bound.Store(false)
		return
	}
	if !s.bound.Swap(true) {
		select {
		case s.became <- struct{}{}:
		default:
		}
	}
}

// liveness is the heartbeat reader's progress, which decides whether the
// reaper may judge anyone. horizon is a time on Redis's clock up to which
// every heartbeat has been read and its leases extended; at is when (on
// the services' clock, base.now) that was last established. A leader that
// has been paused, or whose reader is blocked in Redis or PostgreSQL, has a
// stale at: it expires nobody until it has caught up.
type liveness struct {
	mu      sync.Mutex
	horizon time.Time
	at      time.Time
}

func (v *liveness) caughtUp(horizon, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.horizon, v.at = horizon, now
}

// fresh returns the horizon if it was established within maxAge of now.
func (v *liveness) fresh(now time.Time, maxAge time.Duration) (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.at.IsZero() || now.Sub(v.at) > maxAge {
		return time.Time{}, false
	}
	return v.horizon, true
}

// base is what every leader service holds: the leadership it acts under,
// the configuration, metrics and logger.
type base struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	l       *leaderState
	// now is the clock the services time their own progress by: when the
	// heartbeat reader caught up and extended leases, and the reaper's
	// and maintainer's judgements of how stale that is. time.Now; a test
	// moves it ahead to age them without waiting.
	now func() time.Time
}

// storeError counts and logs a failed PostgreSQL operation. A write refused
// because the epoch was superseded deposes this leader instead.
func (b *base) storeError(ctx context.Context, op storeOp, err error) {
	if store.IsDeposed(err) {
		b.log.WarnContext(ctx, "a write found this leader deposed; stopping", "op", op, "epoch", b.l.epoch, "error", err)
		b.l.depose()
		return
	}
	if ctx.Err() != nil {
		return
	}
	b.metrics.countStoreError(op)
	b.log.ErrorContext(ctx, "postgres operation failed", "op", op, "error", err)
}

// redisError counts and logs a failed Redis operation and pauses a little,
// so that a loop retrying it does not spin.
func (b *base) redisError(ctx context.Context, op redisOp, err error) {
	if ctx.Err() != nil {
		return
	}
	b.metrics.countRedisError(op)
	b.log.ErrorContext(ctx, "redis operation failed", "op", op, "error", err)
	_ = retry.Sleep(ctx, 200*time.Millisecond)
}

// typeLabel bounds the job-type label of metrics to types workers name.
func (b *base) typeLabel(name string) string {
	if b.l.workers.KnownType(name) {
		return name
	}
	return "other"
}
