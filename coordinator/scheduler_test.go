package coordinator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dtsched/dts/internal/schedule"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
)

// newSchedule creates a schedule of the rig's database.
func (r *rig) newSchedule(name, cron, overlap, catchUp string) *store.Schedule {
	r.t.Helper()
	spec, err := schedule.Parse(cron, time.UTC)
	if err != nil {
		r.t.Fatal(err)
	}
	sc, err := r.store.ScheduleInsert(r.ctx, store.ScheduleInsertParams{Name: name, Cron: cron, TimeZone: "UTC",
		Overlap: overlap, CatchUp: catchUp, Job: store.ScheduleJob{Name: "report", Queue: "default",
			Payload: json.RawMessage(`"x"`)}, Next: spec.Next})
	if err != nil {
		r.t.Fatal(err)
	}
	return sc
}

func (r *rig) scheduler() *scheduler { return &scheduler{base: r.b, store: r.store} }

// scheduleJobs returns each tick's job count, and the number of ticks.
func (r *rig) scheduleJobs(id int64) (perTick map[time.Time]int) {
	r.t.Helper()
	rows, err := r.db.Query(r.ctx, `SELECT schedule_tick, count(*) FROM jobs WHERE schedule_id = $1 GROUP BY 1`, id)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	perTick = map[time.Time]int{}
	for rows.Next() {
		var tick time.Time
		var n int
		if err := rows.Scan(&tick, &n); err != nil {
			r.t.Fatal(err)
		}
		perTick[tick.UTC()] = n
	}
	return perTick
}

// TestSchedulerFiresTicks: a schedule firing every second gets one job per
// tick, from its template, on consecutive ticks; the dispatcher is woken.
func TestSchedulerFiresTicks(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	sc := r.newSchedule("every-second", "* * * * * *", schedule.OverlapAllow, schedule.CatchUpNone)
	r.start(r.scheduler())
	var ticks map[time.Time]int
	testwait.For(t, 10*time.Second, "three ticks", func() bool { ticks = r.scheduleJobs(sc.ID); return len(ticks) >= 3 })
	first := sc.NextFireAt.UTC()
	for i := range 3 {
		tick := first.Add(time.Duration(i) * time.Second)
		if ticks[tick] != 1 {
			t.Errorf("tick %v: %d jobs, want 1 (all: %v)", tick, ticks[tick], ticks)
		}
	}
	var name string
	var payload string
	if err := r.db.QueryRow(r.ctx, `SELECT name, payload::text FROM jobs WHERE schedule_id = $1 LIMIT 1`, sc.ID).Scan(&name, &payload); err != nil {
		t.Fatal(err)
	}
	if name != "report" || payload != `"x"` {
		t.Errorf("job from the template: %s %s", name, payload)
	}
	select {
	case <-r.b.l.kick:
	default:
		t.Error("the dispatcher was not woken")
	}
	got, _ := r.store.ScheduleGet(r.ctx, sc.ID)
	if got.LastFireAt == nil || got.NextFireAt.Before(*got.LastFireAt) || got.LastJobID == 0 {
		t.Errorf("schedule after ticks: next %v last %v job %d", got.NextFireAt, got.LastFireAt, got.LastJobID)
	}
}

// TestSchedulerSkipsWhileBusy: with overlap skip, no tick is enqueued
// while the last tick's job is unfinished; once it completes, the next
// tick is.
func TestSchedulerSkipsWhileBusy(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	sc := r.newSchedule("skip", "* * * * * *", schedule.OverlapSkip, schedule.CatchUpNone)
	r.start(r.scheduler())
	testwait.For(t, 10*time.Second, "the first tick", func() bool { return len(r.scheduleJobs(sc.ID)) == 1 })
	skipped := func() float64 { return testutil.ToFloat64(r.b.metrics.scheduleTicks.WithLabelValues(tickSkipped)) }
	testwait.For(t, 10*time.Second, "two skipped ticks", func() bool { return skipped() >= 2 })
	if n := len(r.scheduleJobs(sc.ID)); n != 1 {
		t.Fatalf("%d ticks enqueued while the first job was pending, want 1", n)
	}
	if _, err := r.db.Exec(r.ctx, `UPDATE jobs SET status = 'completed', finished_at = now() WHERE schedule_id = $1`, sc.ID); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "a tick after the job completed", func() bool { return len(r.scheduleJobs(sc.ID)) == 2 })
}

// TestSchedulerCatchUp: after five hours without a leader, an hourly
// schedule with catch-up none enqueues none of the missed ticks, one with
// catch-up one enqueues one (the latest); both then wait for their next
// tick after now.
func TestSchedulerCatchUp(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.b.cfg.ScheduleGrace = 5 * time.Second
	none := r.newSchedule("none", "0 0 * * * *", schedule.OverlapAllow, schedule.CatchUpNone)
	one := r.newSchedule("one", "0 0 * * * *", schedule.OverlapAllow, schedule.CatchUpOne)
	var now time.Time
	if err := r.db.QueryRow(r.ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	down := now.UTC().Truncate(time.Hour).Add(-5 * time.Hour)
	if _, err := r.db.Exec(r.ctx, `UPDATE schedules SET next_fire_at = $1`, down); err != nil {
		t.Fatal(err)
	}
	r.start(r.scheduler())
	for _, sc := range []*store.Schedule{none, one} {
		testwait.For(t, 10*time.Second, sc.Name+" looked at", func() bool {
			got, err := r.store.ScheduleGet(r.ctx, sc.ID)
			return err == nil && got.NextFireAt.After(now)
		})
	}
	late := func(id int64) (ticks []time.Time) {
		for tick := range r.scheduleJobs(id) {
			if tick.Before(now.Add(-r.b.cfg.ScheduleGrace)) {
				ticks = append(ticks, tick)
			}
		}
		return ticks
	}
	if got := late(none.ID); len(got) != 0 {
		t.Errorf("catch-up none enqueued missed ticks %v", got)
	}
	got := late(one.ID)
	if want := now.UTC().Truncate(time.Hour); len(got) != 1 || (!got[0].Equal(want) && !got[0].Equal(want.Add(-time.Hour))) {
		t.Errorf("catch-up one enqueued missed ticks %v, want the latest (%v)", got, want)
	}
	if m := testutil.ToFloat64(r.b.metrics.scheduleTicks.WithLabelValues(tickMissed)); m < 8 {
		t.Errorf("missed ticks counted: %v, want at least 8", m)
	}
}
