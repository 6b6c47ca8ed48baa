package coordinator

import (
	"context"
	"time"

	"github.com/dtsched/dts/internal/schedule"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/store"
)

// scheduleStore is what the scheduler reads and writes.
type scheduleStore interface {
	ScheduleListNext(ctx context.Context, limit int) ([]store.ScheduleNext, time.Time, error)
	ScheduleFire(ctx context.Context, p store.ScheduleFireParams) (store.ScheduleFireResult, error)
}

// Scheduler cadence.
const (
	// scheduleMaxSleep bounds the scheduler's sleep, so that a schedule
	// created, paused, resumed or deleted is seen within it.
	scheduleMaxSleep = time.Second
	// scheduleBatch is how many active schedules one look reads.
	scheduleBatch = 100
)

// scheduler enqueues the ticks of periodic jobs. It sleeps until the
// nearest next tick (at most scheduleMaxSleep), then, for each due
// schedule, plans the ticks from its stored next tick to PostgreSQL's now
// (schedule.Plan: grace, catch-up, overlap) and enqueues them with
// store.ScheduleFire, which is fenced by the epoch and guarded by the
// stored next tick: each tick is enqueued once, whichever leader looks.
type scheduler struct {
	base
	startstop.Loop
	store scheduleStore
}

// Start starts the scheduler; Stop stops it.
func (s *scheduler) Start(ctx context.Context) error {
	s.StartLoop(ctx, s.run)
	return nil
}

func (s *scheduler) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(s.look(ctx))
	}
}

// look fires every due schedule among the nearest scheduleBatch and
// returns how long to sleep before the next look.
func (s *scheduler) look(ctx context.Context) time.Duration {
	started := time.Now()
	list, now, err := s.store.ScheduleListNext(ctx, scheduleBatch)
	if err != nil {
		s.storeError(ctx, storeOpScheduleList, err)
		return scheduleMaxSleep
	}
	sleep := scheduleMaxSleep
	fired := false
	for _, sc := range list {
		next := sc.NextFireAt
		if !next.After(now) {
			var ok bool
			next, ok = s.fire(ctx, sc, now)
			if !ok {
				return scheduleMaxSleep
			}
			fired = true
		}
		if d := next.Sub(now); d < sleep {
			sleep = d
		}
	}
	if fired {
		s.l.wake()
	}
	if len(list) == scheduleBatch && fired {
		return 0 // more may be due
	}
	return max(0, sleep-time.Since(started))
}

// fire plans and enqueues one due schedule's ticks. It returns the
// schedule's next tick, and false when the store failed (the look ends).
func (s *scheduler) fire(ctx context.Context, sc store.ScheduleNext, now time.Time) (time.Time, bool) {
	log := s.log.With("schedule_id", sc.ID)
	loc, err := schedule.LoadLocation(sc.TimeZone)
	var spec *schedule.Spec
	if err == nil {
		spec, err = schedule.Parse(sc.Cron, loc)
	}
	if err != nil { // checked when created; a zone the tz database dropped
		log.ErrorContext(ctx, "schedule cannot be read; it fires nothing", "error", err)
		return now.Add(scheduleMaxSleep), true
	}
	p := spec.Plan(sc.NextFireAt, now, s.cfg.ScheduleGrace, sc.Overlap, sc.CatchUp)
	if p.Next.IsZero() { // no tick within five years
		p.Next = now.Add(24 * time.Hour)
	}
	res, err := s.store.ScheduleFire(ctx, store.ScheduleFireParams{Epoch: s.l.epoch, ScheduleID: sc.ID,
		Expected: sc.NextFireAt, Ticks: p.Fire, Next: p.Next})
	if err != nil {
		s.storeError(ctx, storeOpScheduleFire, err)
		return time.Time{}, false
	}
	if !res.Applied { // paused, deleted or looked at meanwhile: look again soon
		return now.Add(scheduleMaxSleep / 10), true
	}
	skipped := p.Skipped
	if res.Busy {
		skipped += len(p.Fire)
	}
	s.metrics.scheduleTicks.WithLabelValues(tickEnqueued).Add(float64(len(res.JobIDs)))
	s.metrics.scheduleTicks.WithLabelValues(tickSkipped).Add(float64(skipped))
	s.metrics.scheduleTicks.WithLabelValues(tickMissed).Add(float64(p.Missed))
	if p.Missed > 0 || skipped > 0 {
		log.InfoContext(ctx, "schedule ticks not enqueued", "missed", p.Missed, "skipped", skipped,
			"catch_up", sc.CatchUp, "overlap", sc.Overlap)
	}
	if len(res.JobIDs) > 0 {
		log.DebugContext(ctx, "schedule ticks enqueued", "job_ids", res.JobIDs, "next_fire_at", p.Next)
	}
	return p.Next, true
}

// Outcomes of a tick, the outcome label of dts_schedule_ticks_total.
const (
	tickEnqueued = "enqueued"
	tickSkipped  = "skipped"
	tickMissed   = "missed"
)
