package coordinator

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// claimRecorder records how many jobs each claim without limits leased,
// for the claims that leased any.
type claimRecorder struct {
	*store.Store
	sizeLog
}

func (c *claimRecorder) JobClaimBatch(ctx context.Context, p store.JobClaimParams) ([]store.Claimed, error) {
	cs, err := c.Store.JobClaimBatch(ctx, p)
	if len(cs) > 0 {
		c.add(len(cs))
	}
	return cs, err
}

// JobClaimQueues is recorded too: a round whose load of the queue settings
// failed (a slow test server) claims through it, still one statement.
func (c *claimRecorder) JobClaimQueues(ctx context.Context, p store.JobClaimQueuesParams) ([]store.Claimed, error) {
	cs, err := c.Store.JobClaimQueues(ctx, p)
	if len(cs) > 0 {
		c.add(len(cs))
	}
	return cs, err
}

// JobClaimGroups (the plain claims of several groups) is one statement.
func (c *claimRecorder) JobClaimGroups(ctx context.Context, p store.JobClaimGroupsParams) ([]store.Claimed, error) {
	cs, err := c.Store.JobClaimGroups(ctx, p)
	if len(cs) > 0 {
		c.add(len(cs))
	}
	return cs, err
}

// TestDispatchCoolsDownOnlyWhileSlotsAreFree: after a round that found
// fewer due jobs than free slots, the next round waits out the cooldown
// and then claims in one statement every job that came meanwhile; after a
// round that filled its slots (due jobs wait for slots) the next one starts
// without waiting. The cooldown here is an hour: the test ends each wait
// itself, so any round that ran without the test's release did not wait.
func TestDispatchCoolsDownOnlyWhileSlotsAreFree(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rec := &claimRecorder{Store: r.store}
	cooling := make(chan chan struct{})
	d := &dispatcher{base: r.b, store: rec, queue: r.queue, cooldown: time.Hour,
		wait: func(ctx context.Context, w time.Duration) {
			if w <= time.Hour-time.Minute {
				t.Errorf("cooldown wait of %v; want the rest of an hour", w)
			}
			release := make(chan struct{})
			select {
			case cooling <- release:
			case <-ctx.Done():
				return
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}}
	nextCooldown := func() chan struct{} {
		t.Helper()
		select {
		case release := <-cooling:
			return release
		case <-time.After(10 * time.Second):
			t.Fatal("the dispatcher never waited out a cooldown")
			return nil
		}
	}
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "w", JobTypes: []string{"*"}, Concurrency: 10}, time.Now())
	r.start(d)

	// The first round found nothing; the next (the poll timer's) waits.
	release := nextCooldown()
	r.insertIn("default", 0, 3)
	if err := r.queue.Wake(r.ctx, wire.Wake{}); err != nil {
		t.Fatal(err)
	}
	if n := r.count(`SELECT count(*) FROM jobs WHERE status = 'pending'`); n != 3 {
		t.Fatalf("%d jobs pending during the cooldown; want all 3", n)
	}
	close(release)
	// The recorder logs a claim after its statement commits: wait for the
	// log, not for the rows.
	testwait.For(t, 10*time.Second, "the 3 jobs claimed", func() bool { return sum(rec.got()) == 3 })
	if n := r.count(`SELECT count(*) FROM jobs WHERE status = 'leased'`); n != 3 {
		t.Fatalf("%d jobs leased; want 3", n)
	}
	if got := rec.got(); !slices.Equal(got, []int{3}) {
		t.Fatalf("claims = %v; want one of 3", got)
	}

	// 7 slots free, 20 jobs due: the round after the cooldown fills them,
	// so due jobs wait for slots. A new worker's slots are then filled by
	// rounds that do not wait (the poll timer's: nothing else wakes the
	// dispatcher here).
	release = nextCooldown()
	r.insertIn("default", 0, 20)
	close(release)
	testwait.For(t, 10*time.Second, "10 jobs claimed", func() bool { return sum(rec.got()) == 10 })
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "w2", JobTypes: []string{"*"}, Concurrency: 5}, time.Now())
	testwait.For(t, 10*time.Second, "15 jobs claimed", func() bool { return sum(rec.got()) == 15 })
	if n := r.count(`SELECT count(*) FROM jobs WHERE status = 'leased'`); n != 15 {
		t.Fatalf("%d jobs leased; want 15", n)
	}
	if got := rec.got(); !slices.Equal(got, []int{3, 7, 5}) {
		t.Fatalf("claims = %v; want 3, 7, then 5", got)
	}
	select {
	case <-cooling:
		t.Fatal("a round waited out a cooldown while due jobs waited for slots")
	default:
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
