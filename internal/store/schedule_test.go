package store_test

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// everySecond is a schedule's Next for a tick every whole second.
func everySecond(after time.Time) time.Time { return after.Truncate(time.Second).Add(time.Second) }

func (e *env) schedule(t *testing.T, name, overlap string) *store.Schedule {
	t.Helper()
	sc, err := e.s.ScheduleInsert(e.ctx, store.ScheduleInsertParams{Name: name, Cron: "* * * * * *", TimeZone: "UTC",
		Overlap: overlap, CatchUp: "none", Job: store.ScheduleJob{Name: "report", Queue: "default", MaxRetries: 1,
			Payload: json.RawMessage(`{"k":1}`)}, Next: everySecond})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// tickJobs counts the jobs of a schedule's tick.
func (e *env) tickJobs(t *testing.T, id int64, tick time.Time) int {
	t.Helper()
	var n int
	e.scalar(t, &n, `SELECT count(*) FROM jobs WHERE schedule_id = $1 AND schedule_tick = $2`, id, tick)
	return n
}

func TestScheduleCRUD(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := e.now(t)
	a := e.schedule(t, "a", "skip")
	if !a.NextFireAt.After(before) || a.NextFireAt.Nanosecond() != 0 || a.LastFireAt != nil || a.Paused {
		t.Errorf("new schedule: next %v (now %v), last %v, paused %v", a.NextFireAt, before, a.LastFireAt, a.Paused)
	}
	if string(a.Job.Payload) != `{"k": 1}` || a.Job.Name != "report" || a.Job.MaxRetries != 1 {
		t.Errorf("template = %+v", a.Job)
	}
	_, err := e.s.ScheduleInsert(e.ctx, store.ScheduleInsertParams{Name: "a", Cron: "* * * * *", TimeZone: "UTC",
		Overlap: "skip", CatchUp: "none", Job: store.ScheduleJob{Name: "x", Queue: "default"}, Next: everySecond})
	if !errors.Is(err, job.ErrConflict) {
		t.Errorf("a second schedule named a: %v, want ErrConflict", err)
	}
	b := e.schedule(t, "b", "allow")
	c := e.schedule(t, "c", "allow")

	page, next, err := e.s.ScheduleList(e.ctx, 2, 0)
	if err != nil || len(page) != 2 || page[0].ID != c.ID || page[1].ID != b.ID || next != b.ID {
		t.Fatalf("first page: %d rows, next %d, %v", len(page), next, err)
	}
	page, next, err = e.s.ScheduleList(e.ctx, 2, next)
	if err != nil || len(page) != 1 || page[0].ID != a.ID || next != 0 {
		t.Fatalf("last page: %d rows, next %d, %v", len(page), next, err)
	}

	p, err := e.s.SchedulePause(e.ctx, a.ID)
	if err != nil || !p.Paused {
		t.Fatalf("pause: %+v, %v", p, err)
	}
	e.exec(t, `UPDATE schedules SET next_fire_at = now() - interval '1 hour' WHERE id = $1`, a.ID)
	r, err := e.s.ScheduleResume(e.ctx, a.ID, everySecond)
	if err != nil || r.Paused || !r.NextFireAt.After(before) {
		t.Fatalf("resume: %+v, %v; the pause's ticks must not be caught up", r, err)
	}
	again, err := e.s.ScheduleResume(e.ctx, a.ID, func(time.Time) time.Time { t.Fatal("resumed twice"); return time.Time{} })
	if err != nil || !again.NextFireAt.Equal(r.NextFireAt) {
		t.Errorf("resume of an active schedule: %+v, %v", again, err)
	}

	jobID, err := e.s.ScheduleTrigger(e.ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	j := e.get(t, jobID)
	if j.Name != "report" || j.MaxRetries != 1 || j.State != job.StatePending {
		t.Errorf("triggered job = %+v", j)
	}
	if got, _ := e.s.ScheduleGet(e.ctx, a.ID); got.LastFireAt != nil || got.LastJobID != 0 {
		t.Errorf("a trigger moved the schedule's ticks: %+v", got)
	}

	d, err := e.s.ScheduleDelete(e.ctx, a.ID)
	if err != nil || d.ID != a.ID {
		t.Fatalf("delete: %v", err)
	}
	var sid *int64
	e.scalar(t, &sid, `SELECT schedule_id FROM jobs WHERE id = $1`, jobID)
	if sid != nil {
		t.Errorf("the deleted schedule's job keeps schedule_id %d", *sid)
	}
	for what, err := range map[string]error{
		"get":     func() error { _, err := e.s.ScheduleGet(e.ctx, a.ID); return err }(),
		"pause":   func() error { _, err := e.s.SchedulePause(e.ctx, a.ID); return err }(),
		"resume":  func() error { _, err := e.s.ScheduleResume(e.ctx, a.ID, everySecond); return err }(),
		"trigger": func() error { _, err := e.s.ScheduleTrigger(e.ctx, a.ID); return err }(),
		"delete":  func() error { _, err := e.s.ScheduleDelete(e.ctx, a.ID); return err }(),
	} {
		if !errors.Is(err, job.ErrNotFound) {
			t.Errorf("%s of a deleted schedule: %v, want ErrNotFound", what, err)
		}
	}
}

// TestScheduleFire: a look enqueues its ticks and moves the next tick on;
// a second look at the same tick changes nothing; a tick enqueued already
// is not enqueued again even when next_fire_at is put back.
func TestScheduleFire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sc := e.schedule(t, "s", "allow")
	t0 := sc.NextFireAt
	t1, t2 := t0.Add(time.Second), t0.Add(2*time.Second)
	fire := func(expected time.Time, ticks ...time.Time) store.ScheduleFireResult {
		t.Helper()
		res, err := e.s.ScheduleFire(e.ctx, store.ScheduleFireParams{Epoch: e.epoch, ScheduleID: sc.ID, Expected: expected,
			Ticks: ticks, Next: ticks[len(ticks)-1].Add(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := fire(t0, t0, t1); !res.Applied || len(res.JobIDs) != 2 {
		t.Fatalf("first look: %+v", res)
	}
	got, _ := e.s.ScheduleGet(e.ctx, sc.ID)
	if !got.NextFireAt.Equal(t2) || got.LastFireAt == nil || !got.LastFireAt.Equal(t1) || got.LastJobID == 0 {
		t.Errorf("after the look: next %v last %v job %d; want %v, %v", got.NextFireAt, got.LastFireAt, got.LastJobID, t2, t1)
	}
	if res := fire(t0, t0, t1); res.Applied || len(res.JobIDs) != 0 {
		t.Errorf("a second look at the same tick: %+v, want nothing", res)
	}
	e.exec(t, `UPDATE schedules SET next_fire_at = $2 WHERE id = $1`, sc.ID, t1)
	if res := fire(t1, t1, t2); !res.Applied || len(res.JobIDs) != 1 {
		t.Errorf("a look over an enqueued tick and a new one: %+v, want one job", res)
	}
	for _, tick := range []time.Time{t0, t1, t2} {
		if n := e.tickJobs(t, sc.ID, tick); n != 1 {
			t.Errorf("tick %v: %d jobs, want 1", tick, n)
		}
	}
	var trigger, sched int
	e.scalar(t, &sched, `SELECT count(*) FROM jobs WHERE schedule_id = $1`, sc.ID)
	if _, err := e.s.ScheduleTrigger(e.ctx, sc.ID); err != nil {
		t.Fatal(err)
	}
	e.scalar(t, &trigger, `SELECT count(*) FROM jobs WHERE schedule_id = $1 AND schedule_tick IS NULL`, sc.ID)
	if sched != 3 || trigger != 1 {
		t.Errorf("%d tick jobs and %d triggered, want 3 and 1", sched, trigger)
	}
	// Paused: the look changes nothing.
	if _, err := e.s.SchedulePause(e.ctx, sc.ID); err != nil {
		t.Fatal(err)
	}
	got, _ = e.s.ScheduleGet(e.ctx, sc.ID)
	if res := fire(got.NextFireAt, got.NextFireAt); res.Applied {
		t.Errorf("a look at a paused schedule: %+v", res)
	}
}

// TestScheduleFireSkipWhileBusy: with overlap skip, a tick is not enqueued
// while the last tick's job is unfinished; the next tick still moves on.
func TestScheduleFireSkipWhileBusy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sc := e.schedule(t, "s", "skip")
	t0 := sc.NextFireAt
	look := func(expected, tick time.Time) store.ScheduleFireResult {
		t.Helper()
		res, err := e.s.ScheduleFire(e.ctx, store.ScheduleFireParams{Epoch: e.epoch, ScheduleID: sc.ID, Expected: expected,
			Ticks: []time.Time{tick}, Next: tick.Add(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := look(t0, t0)
	if len(first.JobIDs) != 1 || first.Busy {
		t.Fatalf("first tick: %+v", first)
	}
	t1 := t0.Add(time.Second)
	if res := look(t1, t1); !res.Applied || !res.Busy || len(res.JobIDs) != 0 {
		t.Errorf("tick while the first job is pending: %+v, want busy", res)
	}
	e.exec(t, `UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = $1`, first.JobIDs[0])
	t2 := t1.Add(time.Second)
	if res := look(t2, t2); res.Busy || len(res.JobIDs) != 1 {
		t.Errorf("tick after the first job completed: %+v, want one job", res)
	}
	if n := e.tickJobs(t, sc.ID, t1); n != 0 {
		t.Errorf("the skipped tick has %d jobs", n)
	}
}

// TestScheduleFireAcrossLeaders: an old and a new leader look at the same
// tick while leadership changes hands; whatever the order, the tick is one
// job, and the old leader is either first or refused (ErrDeposed).
func TestScheduleFireAcrossLeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 20 {
		sc := e.schedule(t, "race"+string(rune('a'+i)), "allow")
		tick := sc.NextFireAt
		p := store.ScheduleFireParams{ScheduleID: sc.ID, Expected: tick, Ticks: []time.Time{tick}, Next: tick.Add(time.Second)}
		old := e.epoch
		var wg sync.WaitGroup
		var oldRes store.ScheduleFireResult
		var oldErr error
		wg.Go(func() {
			op := p
			op.Epoch = old
			oldRes, oldErr = e.s.ScheduleFire(e.ctx, op)
		})
		if err := e.s.LeaderResign(e.ctx, old); err != nil {
			t.Fatal(err)
		}
		epoch, err := e.s.LeaderAcquire(e.ctx, "successor", time.Hour)
		if err != nil || epoch != old+1 {
			t.Fatalf("take-over: %d, %v", epoch, err)
		}
		e.epoch = epoch
		np := p
		np.Epoch = epoch
		newRes, err := e.s.ScheduleFire(e.ctx, np)
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		switch {
		case oldErr == nil && oldRes.Applied && len(oldRes.JobIDs) == 1 && !newRes.Applied:
		case errors.Is(oldErr, job.ErrDeposed) && newRes.Applied && len(newRes.JobIDs) == 1:
		default:
			t.Errorf("round %d: old leader %+v, %v; new leader %+v", i, oldRes, oldErr, newRes)
		}
		if n := e.tickJobs(t, sc.ID, tick); n != 1 {
			t.Errorf("round %d: %d jobs for the tick, want 1", i, n)
		}
	}

	// A deposed leader that looks later changes nothing at all.
	sc := e.schedule(t, "late", "allow")
	_, err := e.s.ScheduleFire(e.ctx, store.ScheduleFireParams{Epoch: e.epoch - 1, ScheduleID: sc.ID,
		Expected: sc.NextFireAt, Ticks: []time.Time{sc.NextFireAt}, Next: sc.NextFireAt.Add(time.Second)})
	if !errors.Is(err, job.ErrDeposed) {
		t.Errorf("deposed leader's look: %v, want ErrDeposed", err)
	}
	if got, _ := e.s.ScheduleGet(e.ctx, sc.ID); !got.NextFireAt.Equal(sc.NextFireAt) || e.tickJobs(t, sc.ID, sc.NextFireAt) != 0 {
		t.Errorf("the deposed leader's look changed the schedule: %+v", got)
	}
}
