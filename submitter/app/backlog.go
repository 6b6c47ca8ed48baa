package app

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dtsched/dts/internal/startstop"
)

// backlogGuard is the submitter's admission control: with a bound set
// (Config.MaxBacklog), it counts the due jobs every interval and, while
// they reach the bound, submissions are answered 503 backlog_full with
// Retry-After instead of being inserted.
//
// Why: inserts are cheaper than the claims and completions that work the
// jobs, so clients that post as fast as they are answered can take the
// database from the workers: a flood cuts completions while the backlog
// grows without end. With a bound, the accepted rate falls to the rate the
// workers finish jobs, and they finish at full speed (docs/benchmarks.md,
// overload).
//
// The count stops at the bound, so its cost does not grow with the
// backlog. Between two counts the guard adds the jobs this submitter
// accepted, so a flood cannot overshoot the bound by a whole interval's
// worth. It must not count a job twice, which would refuse below the
// bound: a submission takes a mark (the counts started so far) before its
// INSERT, and its jobs are not added once a count that started after the
// mark has answered, since that count may have seen them; the jobs of an
// INSERT that began while a count ran are added to that count's answer.
// So the guard may overshoot by the requests in flight, by what other
// submitters accept meanwhile, and by the jobs of an INSERT that began
// before a count was sent and that its snapshot missed (the next count
// sees them). It counts a job twice only if a count sent before the
// INSERT took its snapshot after the INSERT committed, and then only
// until the next count. Jobs already accepted are never affected; the
// bound only refuses new ones.
type backlogGuard struct {
	count    func(ctx context.Context, limit int64) (int64, error)
	max      int64
	interval time.Duration
	log      *slog.Logger
	due      atomic.Int64 // the last count plus the jobs accepted since
	refusing bool         // what the last count said (run's goroutine only): for the log
	mu       sync.Mutex   // orders accepted's check and add against a count's start and answer
	started  uint64       // counts started (mu)
	answered uint64       // which count's answer due holds, by its place in started (mu)
	counting bool         // a count is running, the one numbered started (mu)
	carry    int64        // jobs added while it runs whose INSERT began after it was sent (mu)
	startstop.Loop
}

// newBacklogGuard returns a guard that Start makes count every interval;
// max ≤ 0 means no bound, and then nothing runs and admit always says yes.
func newBacklogGuard(count func(context.Context, int64) (int64, error), max int64, interval time.Duration,
	log *slog.Logger) *backlogGuard {
	return &backlogGuard{count: count, max: max, interval: interval, log: log}
}

// Start starts counting, when there is a bound.
func (g *backlogGuard) Start(ctx context.Context) error {
	if g.max > 0 {
		g.StartLoop(ctx, g.run)
	}
	return nil
}

// admit reports whether a submission may be inserted now.
func (g *backlogGuard) admit() bool { return g.max <= 0 || g.due.Load() < g.max }

// mark returns the counts started so far, taken before the INSERT of the
// jobs it will report to accepted.
func (g *backlogGuard) mark() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started
}

// accepted records n jobs just created by an INSERT that began at mark,
// until the next count sees them; unless a count that started after mark
// has answered already, which may have seen them. Jobs added while a
// count sent before their INSERT runs are carried over into its answer.
func (g *backlogGuard) accepted(n int, mark uint64) {
	if g.max <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.answered > mark {
		return
	}
	g.due.Add(int64(n))
	if g.counting && g.started == mark {
		g.carry += int64(n)
	}
}

func (g *backlogGuard) run(ctx context.Context) {
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
	g.mu.Lock()
	g.started++
	seq := g.started
	g.counting, g.carry = true, 0
	g.mu.Unlock()
	n, err := g.count(cctx, g.max)
	g.mu.Lock()
	g.counting = false
	if err == nil {
		g.due.Store(n + g.carry)
		g.answered = seq
	}
	g.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			// Keep the last answer: inserts fail anyway while the
			// database cannot be read.
			g.log.WarnContext(ctx, "counting the backlog failed", "error", err)
		}
		return
	}
	if full := n >= g.max; full != g.refusing {
		g.refusing = full
		if full {
			g.log.WarnContext(ctx, "backlog at its bound: refusing submissions until workers catch up", "due_jobs", n, "max_backlog", g.max)
		} else {
			g.log.InfoContext(ctx, "backlog under its bound again: accepting submissions", "due_jobs", n, "max_backlog", g.max)
		}
	}
}

// BacklogCounts returns how many backlog counts have been sent and which
// has answered (by its place among those sent), so that a caller can wait
// for a count that saw what it did.
func (a *App) BacklogCounts() (started, answered uint64) {
	a.backlog.mu.Lock()
	defer a.backlog.mu.Unlock()
	return a.backlog.started, a.backlog.answered
}
