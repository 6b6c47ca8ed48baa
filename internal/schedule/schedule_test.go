package schedule

import (
	"strings"
	"testing"
	"time"
)

func mustSpec(t *testing.T, expr, tz string) *Spec {
	t.Helper()
	loc, err := LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(expr, loc)
	if err != nil {
		t.Fatalf("Parse(%q): %v", expr, err)
	}
	return s
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		expr    string
		wantErr string // "" for valid
	}{
		{"*/5 * * * *", ""},
		{"* * * * * *", ""},
		{"0 30 9 * * MON-FRI", ""},
		{"@daily", ""},
		{"", "required"},
		{"* * * *", "not a cron expression"},
		{"61 * * * *", "not a cron expression"},
		{"* * * * * * *", "not a cron expression"},
		{"@every 5s", "@every"},
		{"CRON_TZ=UTC * * * * *", "time_zone"},
		{"0 0 30 2 *", "never fires"},
		{strings.Repeat("1,", 150) + "1 * * * *", "at most"},
	} {
		_, err := Parse(c.expr, time.UTC)
		if c.wantErr == "" && err != nil {
			t.Errorf("Parse(%q) = %v, want no error", c.expr, err)
		}
		if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("Parse(%q) = %v, want an error with %q", c.expr, err, c.wantErr)
		}
	}
	for _, tz := range []string{"", "Local", "Mars/Olympus"} {
		if _, err := LoadLocation(tz); err == nil {
			t.Errorf("LoadLocation(%q) succeeded", tz)
		}
	}
}

// TestNextInTimeZone: ticks are computed in the schedule's zone, across a
// daylight-saving change, and returned in UTC.
func TestNextInTimeZone(t *testing.T) {
	t.Parallel()
	s := mustSpec(t, "0 9 * * *", "Europe/Paris")
	// 2026-03-29 is the spring change in Paris: 09:00 is UTC+2 from then.
	got := s.Next(time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC))
	if want := time.Date(2026, 3, 29, 7, 0, 0, 0, time.UTC); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("Next = %v, want %v", got, want)
	}
	got = s.Next(time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC))
	if want := time.Date(2026, 3, 28, 8, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("Next = %v, want %v", got, want)
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	everySec := mustSpec(t, "* * * * * *", "UTC")
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }
	for _, c := range []struct {
		name             string
		next, now        time.Time
		grace            time.Duration
		overlap, catchUp string
		fire             []time.Time
		missed, skipped  int
		nextTick         time.Time
	}{
		{"not due", at(10), at(9).Add(500 * time.Millisecond), 5 * time.Second, OverlapAllow, CatchUpNone, nil, 0, 0, at(10)},
		{"due now", at(10), at(10), 5 * time.Second, OverlapAllow, CatchUpNone, []time.Time{at(10)}, 0, 0, at(11)},
		{"late within grace: every tick fires", at(10), at(13).Add(time.Millisecond), 5 * time.Second, OverlapAllow, CatchUpNone,
			[]time.Time{at(10), at(11), at(12), at(13)}, 0, 0, at(14)},
		{"late within grace, skip: the latest fires", at(10), at(13), 5 * time.Second, OverlapSkip, CatchUpNone,
			[]time.Time{at(13)}, 0, 3, at(14)},
		{"downtime, catch-up none: only on-time ticks", at(10), at(100), 5 * time.Second, OverlapAllow, CatchUpNone,
			[]time.Time{at(95), at(96), at(97), at(98), at(99), at(100)}, 85, 0, at(101)},
		{"downtime, catch-up one: the latest missed and the on-time ones", at(10), at(100), 5 * time.Second, OverlapAllow, CatchUpOne,
			[]time.Time{at(94), at(95), at(96), at(97), at(98), at(99), at(100)}, 84, 0, at(101)},
		{"downtime, catch-up one, skip", at(10), at(100), 5 * time.Second, OverlapSkip, CatchUpOne,
			[]time.Time{at(100)}, 84, 6, at(101)},
	} {
		p := everySec.Plan(c.next, c.now, c.grace, c.overlap, c.catchUp)
		if !equalTimes(p.Fire, c.fire) || p.Missed != c.missed || p.Skipped != c.skipped || !p.Next.Equal(c.nextTick) {
			t.Errorf("%s: Plan = fire %v missed %d skipped %d next %v; want fire %v missed %d skipped %d next %v",
				c.name, p.Fire, p.Missed, p.Skipped, p.Next, c.fire, c.missed, c.skipped, c.nextTick)
		}
	}

	// An hourly schedule down for a day, catch-up one: the 23:00 tick.
	hourly := mustSpec(t, "0 * * * *", "UTC")
	p := hourly.Plan(base.Add(time.Hour), base.Add(24*time.Hour+30*time.Minute), time.Minute, OverlapAllow, CatchUpOne)
	if want := base.Add(24 * time.Hour); len(p.Fire) != 1 || !p.Fire[0].Equal(want) || p.Missed != 23 {
		t.Errorf("hourly after a day: %+v, want one fire at %v and 23 missed", p, want)
	}

	// A year missed of a per-second schedule: bounded work, next is after now.
	now := base.Add(365 * 24 * time.Hour)
	p = everySec.Plan(base, now, time.Second, OverlapAllow, CatchUpOne)
	if p.Missed+1 != maxMissedCounted || !p.Next.After(now) || len(p.Fire) != 3 {
		t.Errorf("a year missed: missed %d, fire %v, next %v", p.Missed, p.Fire, p.Next)
	}
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}
