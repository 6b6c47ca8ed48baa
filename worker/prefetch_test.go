package worker

import (
	"context"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/wire"
)

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
