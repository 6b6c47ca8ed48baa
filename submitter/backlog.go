package submitter

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// backlogGuard is the submitter's admission control: with a bound set
// (Config.MaxBacklog), it counts the due jobs every interval and, while
// they reach the bound, submissions are answered 503 backlog_full with
// Retry-After instead of being inserted.
//
// Why: inserts are cheaper than the claims and completions that work the
// jobs, so clients that post as fast as they are answered can take the
// database from the workers. On two cores a flood of 82,000 accepted jobs a
// second cut completions from 25,000/s to 12,000/s (2,400/s with one
// submitter connection), and the backlog grew by millions a minute. With a
// bound, the accepted rate falls to the rate the workers finish jobs.
//
// The count stops at the bound, so its cost does not grow with the
// backlog. The check is approximate: jobs accepted between two counts may
// overshoot the bound by up to one interval's worth. Jobs already accepted
// are never affected; the bound only refuses new ones.
type backlogGuard struct {
	count    func(ctx context.Context, limit int64) (int64, error)
	max      int64
	interval time.Duration
	log      *slog.Logger
	full     atomic.Bool
	stop     context.CancelFunc
	done     chan struct{}
}

// newBacklogGuard starts counting every interval; max ≤ 0 means no bound,
// and then nothing runs and admit always says yes.
func newBacklogGuard(count func(context.Context, int64) (int64, error), max int64, interval time.Duration,
	log *slog.Logger) *backlogGuard {
	g := &backlogGuard{count: count, max: max, interval: interval, log: log, done: make(chan struct{})}
	if max <= 0 {
		close(g.done)
		g.stop = func() {}
		return g
	}
	ctx, stop := context.WithCancel(context.Background())
	g.stop = stop
	go g.run(ctx)
	return g
}

// admit reports whether a submission may be inserted now.
func (g *backlogGuard) admit() bool { return !g.full.Load() }

// Close stops counting.
func (g *backlogGuard) Close() {
	g.stop()
	<-g.done
}

func (g *backlogGuard) run(ctx context.Context) {
	defer close(g.done)
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for {
		g.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (g *backlogGuard) check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, max(g.interval, time.Second))
	defer cancel()
	n, err := g.count(cctx, g.max)
	if err != nil {
		if ctx.Err() == nil {
			// Keep the last answer: inserts fail anyway while the
			// database cannot be read.
			g.log.Warn("counting the backlog failed", "err", err)
		}
		return
	}
	full := n >= g.max
	if was := g.full.Swap(full); was != full {
		if full {
			g.log.Warn("backlog at its bound: refusing submissions until workers catch up", "due_jobs", n, "max_backlog", g.max)
		} else {
			g.log.Info("backlog under its bound again: accepting submissions", "due_jobs", n, "max_backlog", g.max)
		}
	}
}
