package worker

import (
	"context"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/wire"
)

func TestAdaptPrefetch(t *testing.T) {
	t.Parallel()
	adapts := Config{Prefetch: 4, PrefetchMax: 300}
	for _, c := range []struct {
		name    string
		cfg     Config
		done    int64
		elapsed time.Duration
		want    int
	}{
		{"fixed: no PrefetchMax", Config{Prefetch: 4}, 10_000, time.Second, 4},
		{"fixed: PrefetchMax at Prefetch", Config{Prefetch: 4, PrefetchMax: 4}, 10_000, time.Second, 4},
		{"slow jobs keep the floor", adapts, 8, time.Second, 4},
		{"250 ms of the rate", adapts, 800, time.Second, 200},
		{"a short interval counts as its rate", adapts, 40, 50 * time.Millisecond, 200},
		{"no more than PrefetchMax", adapts, 50_000, time.Second, 300},
		{"nothing done", adapts, 0, time.Second, 4},
		{"no time passed", adapts, 10, 0, 4},
	} {
		if got := adaptPrefetch(c.cfg, c.done, c.elapsed); got != c.want {
			t.Errorf("%s: adaptPrefetch(%+v, %d, %v) = %d, want %d", c.name, c.cfg, c.done, c.elapsed, got, c.want)
		}
	}
}

// TestPrefetchFollowsTheJobs: a worker whose prefetch adapts says a larger
// one in its heartbeats while no-op jobs pour through it, and its floor
// again once they stop.
func TestPrefetchFollowsTheJobs(t *testing.T) {
	t.Parallel()
	c := pourNoops(t, 0)
	c.heartbeat("prefetch 40 while the jobs pour through", func(hb wire.Heartbeat) bool { return hb.Prefetch == 40 })
	c.heartbeat("prefetch 1 again once they stopped", func(hb wire.Heartbeat) bool { return hb.Prefetch == 1 })
}

// TestPrefetchGrowsBeforeTheNextHeartbeat: when jobs start pouring
// through, a worker whose prefetch adapts says a larger prefetch within a
// sample or two, in a heartbeat of its own, not at its next regular one
// (an hour away here). How large depends on how fast the loaded machine
// runs the jobs, and an early heartbeat needs twice the prefetch said
// before, so the test asks only for growth.
func TestPrefetchGrowsBeforeTheNextHeartbeat(t *testing.T) {
	t.Parallel()
	c := pourNoops(t, time.Hour)
	c.heartbeat("a prefetch above the floor long before the next regular heartbeat", func(hb wire.Heartbeat) bool { return hb.Prefetch > 1 })
}

// pourNoops runs a worker of 2 slots whose prefetch adapts from 1 to 40,
// heartbeating every interval (0: newTestWorker's default), checks that
// its first heartbeat says the floor, then delivers it 3,000 no-op jobs.
func pourNoops(t *testing.T, interval time.Duration) *coordinator {
	t.Helper()
	prefix := redistest.Prefix(t)
	w := newTestWorker(t, redistest.URL(), prefix, Config{Concurrency: 2, Prefetch: 1, PrefetchMax: 40, HeartbeatInterval: interval})
	w.Handle("noop", func(context.Context, *Job) (any, error) { return nil, nil })
	c := newCoordinator(t, redistest.URL(), prefix, w.ID())
	run(t, w)
	if hb := c.heartbeat("first", func(wire.Heartbeat) bool { return true }); hb.Prefetch != 1 {
		t.Fatalf("first heartbeat says prefetch %d, want the floor, 1", hb.Prefetch)
	}
	ds := make([]wire.Delivery, 3000)
	for i := range ds {
		ds[i] = delivery(int64(i+1), int64(i+1), "noop", 1)
	}
	c.deliver(ds...)
	return c
}

// TestEarlyPrefetch: a sample between heartbeats says a new prefetch at
// once when it doubles the one said, or reaches PrefetchMax; smaller steps
// and every shrink wait for the regular heartbeat.
func TestEarlyPrefetch(t *testing.T) {
	t.Parallel()
	adapts := Config{Prefetch: 4, PrefetchMax: 300}
	type sample struct {
		said    int
		done    int64
		elapsed time.Duration
	}
	for _, c := range []struct {
		name  string
		cfg   Config
		in    sample
		want  int
		early bool
	}{
		{"doubles", adapts, sample{50, 100, prefetchWindow}, 100, true},
		{"a step below double waits", adapts, sample{60, 100, prefetchWindow}, 100, false},
		{"the last step, to PrefetchMax, from above half of it", adapts, sample{200, 1000, prefetchWindow}, 300, true},
		{"at PrefetchMax already", adapts, sample{300, 1000, prefetchWindow}, 300, false},
		{"a shrink waits", adapts, sample{200, 10, prefetchWindow}, 10, false},
		{"a sample shorter than the window counts as its rate", adapts, sample{4, 25, prefetchSample}, 100, true},
		{"a fixed prefetch never beats early", Config{Prefetch: 4}, sample{4, 1000, prefetchWindow}, 4, false},
	} {
		got, early := earlyPrefetch(c.cfg, c.in.said, c.in.done, c.in.elapsed)
		if got != c.want || early != c.early {
			t.Errorf("%s: earlyPrefetch(%+v) = %d, %v; want %d, %v", c.name, c.in, got, early, c.want, c.early)
		}
	}
}
