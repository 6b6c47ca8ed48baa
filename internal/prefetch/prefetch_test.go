package prefetch

import (
	"testing"
	"time"
)

func TestAdapt(t *testing.T) {
	t.Parallel()
	adapts := Bounds{Min: 4, Max: 300}
	for _, c := range []struct {
		name    string
		b       Bounds
		done    int64
		elapsed time.Duration
		want    int
	}{
		{"fixed: no Max", Bounds{Min: 4}, 10_000, time.Second, 4},
		{"fixed: Max at Min", Bounds{Min: 4, Max: 4}, 10_000, time.Second, 4},
		{"slow jobs keep the floor", adapts, 8, time.Second, 4},
		{"250 ms of the rate", adapts, 800, time.Second, 200},
		{"a short interval counts as its rate", adapts, 40, 50 * time.Millisecond, 200},
		{"no more than Max", adapts, 50_000, time.Second, 300},
		{"nothing done", adapts, 0, time.Second, 4},
		{"no time passed", adapts, 10, 0, 4},
	} {
		if got := c.b.Adapt(c.done, c.elapsed); got != c.want {
			t.Errorf("%s: %+v.Adapt(%d, %v) = %d, want %d", c.name, c.b, c.done, c.elapsed, got, c.want)
		}
	}
}

// TestEarly: a sample between heartbeats says a new prefetch at once when
// it doubles the one said, or reaches Max; smaller steps and every shrink
// wait for the regular heartbeat.
func TestEarly(t *testing.T) {
	t.Parallel()
	adapts := Bounds{Min: 4, Max: 300}
	type sample struct {
		said    int
		done    int64
		elapsed time.Duration
	}
	for _, c := range []struct {
		name  string
		b     Bounds
		in    sample
		want  int
		early bool
	}{
		{"doubles", adapts, sample{50, 100, Window}, 100, true},
		{"a step below double waits", adapts, sample{60, 100, Window}, 100, false},
		{"the last step, to Max, from above half of it", adapts, sample{200, 1000, Window}, 300, true},
		{"at Max already", adapts, sample{300, 1000, Window}, 300, false},
		{"a shrink waits", adapts, sample{200, 10, Window}, 10, false},
		{"a sample shorter than the window counts as its rate", adapts, sample{4, 25, Sample}, 100, true},
		{"a fixed prefetch never beats early", Bounds{Min: 4}, sample{4, 1000, Window}, 4, false},
	} {
		got, early := c.b.Early(c.in.said, c.in.done, c.in.elapsed)
		if got != c.want || early != c.early {
			t.Errorf("%s: %+v.Early(%+v) = %d, %v; want %d, %v", c.name, c.b, c.in, got, early, c.want, c.early)
		}
	}
}
