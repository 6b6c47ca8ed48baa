// Package schedule reads the cron expressions of periodic jobs and decides,
// as pure functions of a schedule, its next tick and a time, which ticks
// fire. The submitter uses it to check a new schedule and to find its first
// tick; the leader coordinator's scheduler uses it at every tick.
//
// Why it is shaped this way: a tick is identified by its time, and the
// enqueue of a tick is made exactly once by a unique key of (schedule,
// tick) in PostgreSQL and by the leader's epoch fence (see
// docs/architecture.md, "Periodic jobs"). That works only if every
// coordinator computes the same ticks from the same stored next tick:
// Plan is deterministic, takes its clock as an argument, and the parser is
// robfig/cron's, not a hand-written one.
//
// What must stay true:
//   - Next(t) is strictly after t and a whole second; ticks are instants
//     (UTC), computed in the schedule's time zone.
//   - Plan never returns a tick before the stored next tick or after now,
//     and its Next is after now: a tick is looked at once.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // every coordinator knows every zone, whatever its host has

	"github.com/robfig/cron/v3"
)

// Overlap policies: what a tick does while the job of the schedule's
// previous tick is not final.
const (
	OverlapSkip  = "skip"  // the tick is skipped
	OverlapAllow = "allow" // the tick is enqueued anyway
)

// Catch-up policies: what happens to ticks missed by more than the grace
// period (no coordinator led, or every one was down).
const (
	CatchUpNone = "none" // missed ticks are dropped
	CatchUpOne  = "one"  // one job is enqueued for the latest missed tick
)

// MaxCronLen bounds a cron expression's length.
const MaxCronLen = 200

// maxMissedCounted bounds how many missed ticks one Plan walks: a schedule
// firing every second that missed a year has 31 million. Past it, the rest
// are dropped without being counted, and the catch-up tick is the last one
// counted.
const maxMissedCounted = 100_000

// parser reads 5 fields (minute hour day-of-month month day-of-week), or 6
// with seconds first, and the descriptors @yearly, @monthly, @weekly,
// @daily and @hourly.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed cron expression in a time zone.
type Spec struct {
	sched *cron.SpecSchedule
}

// LoadLocation returns the IANA time zone name ("Europe/Paris", "UTC").
// "Local" and "" are refused: a schedule must not depend on the host.
func LoadLocation(name string) (*time.Location, error) {
	if name == "" || name == "Local" {
		return nil, errors.New("must be an IANA time zone name such as UTC or Europe/Paris")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	return loc, nil
}

// Parse reads a cron expression for the time zone loc. Its error says
// what is wrong with the expression, without the field's name.
func Parse(expr string, loc *time.Location) (*Spec, error) {
	e := strings.TrimSpace(expr)
	switch {
	case e == "":
		return nil, errors.New("required")
	case len(e) > MaxCronLen:
		return nil, fmt.Errorf("is %d bytes long, at most %d are allowed", len(e), MaxCronLen)
	case strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ="):
		return nil, errors.New("give the time zone in time_zone, not in the expression")
	case strings.HasPrefix(e, "@every"):
		return nil, errors.New("@every is not supported; use a cron expression such as */5 * * * * *")
	}
	s, err := parser.Parse(e)
	if err != nil {
		return nil, fmt.Errorf("not a cron expression (5 fields, or 6 with seconds first): %v", err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, errors.New("not a cron expression")
	}
	spec.Location = loc
	sp := &Spec{sched: spec}
	if sp.Next(time.Now()).IsZero() {
		return nil, errors.New("never fires")
	}
	return sp, nil
}

// Next returns the first tick strictly after t, in UTC; zero if there is
// none in the next five years.
func (s *Spec) Next(t time.Time) time.Time {
	n := s.sched.Next(t)
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// Plan is what one look at a due schedule decides.
type Plan struct {
	// Fire are the ticks to enqueue, oldest first.
	Fire []time.Time
	// Missed counts the ticks dropped because they were more than the
	// grace period late (the catch-up policy's), Skipped those folded
	// into a later tick by the skip overlap policy.
	Missed, Skipped int
	// Next is the schedule's next tick after now.
	Next time.Time
}

// Plan decides which ticks from next (the schedule's stored next tick) up
// to now fire. A tick at most grace before now is on time and fires; the
// earlier ones were missed: catch-up none drops them, one fires the
// latest of them. With overlap skip at most one tick fires per look (the
// latest); whether the previous tick's job is still running is for the
// caller to check when it enqueues.
func (s *Spec) Plan(next, now time.Time, grace time.Duration, overlap, catchUp string) Plan {
	var p Plan
	cut := now.Add(-grace) // a tick before cut was missed
	t := next
	var lastMissed time.Time
	for !t.IsZero() && t.Before(cut) {
		if p.Missed == maxMissedCounted {
			t = s.Next(cut.Add(-time.Nanosecond)) // the first tick at or after cut
			break
		}
		p.Missed++
		lastMissed = t
		t = s.Next(t)
	}
	if catchUp == CatchUpOne && p.Missed > 0 {
		p.Fire = append(p.Fire, lastMissed)
		p.Missed--
	}
	for !t.IsZero() && !t.After(now) {
		p.Fire = append(p.Fire, t)
		t = s.Next(t)
	}
	p.Next = t
	if overlap == OverlapSkip && len(p.Fire) > 1 {
		p.Skipped = len(p.Fire) - 1
		p.Fire = p.Fire[len(p.Fire)-1:]
	}
	return p
}
