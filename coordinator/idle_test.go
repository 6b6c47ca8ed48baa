package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// typesRecorder records the job types of every plain claim.
type typesRecorder struct {
	*store.Store
	mu    sync.Mutex
	types []string
}

func (c *typesRecorder) JobClaimBatch(ctx context.Context, p store.JobClaimParams) ([]store.Claimed, error) {
	c.mu.Lock()
	c.types = append(c.types, p.Types...)
	c.mu.Unlock()
	return c.Store.JobClaimBatch(ctx, p)
}

// JobClaimGroups is the plain claim of several groups in one statement.
func (c *typesRecorder) JobClaimGroups(ctx context.Context, p store.JobClaimGroupsParams) ([]store.Claimed, error) {
	c.mu.Lock()
	for _, g := range p.Groups {
		c.types = append(c.types, g.Types...)
	}
	c.mu.Unlock()
	return c.Store.JobClaimGroups(ctx, p)
}

// take returns the types claimed for since the last take, sorted.
func (c *typesRecorder) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.types
	c.types = nil
	slices.Sort(out)
	return out
}

// TestDispatchIdleGroupsWaitForTheirNames: among 20 worker groups, one
// per job name, a group whose last claim found nothing is claimed for
// again only when a wake-up names one of its job names, when a wake-up
// says any name, or in the first round a poll interval after the last
// full one (retries and scheduled jobs come due by time); a group whose
// claim found jobs is claimed for in every round.
func TestDispatchIdleGroupsWaitForTheirNames(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rec := &typesRecorder{Store: r.store}
	d := &dispatcher{base: r.b, store: rec, queue: r.queue}
	d.cfg.PollInterval = time.Hour // full rounds only when the test says
	var all []string
	for g := range 20 {
		name := fmt.Sprintf("t%02d", g)
		all = append(all, name)
		r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "w" + name, JobTypes: []string{name}, Concurrency: 4}, time.Now())
	}
	round := func(scope roundScope) {
		t.Helper()
		if _, err := d.roundDelivered(r.ctx, scope); err != nil {
			t.Fatal(err)
		}
	}
	insert := func(name string) {
		t.Helper()
		if _, err := r.store.JobInsert(r.ctx, []store.JobInsertParams{{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	leased := func(name string) int {
		return r.count(`SELECT count(*) FROM jobs WHERE status = 'leased' AND name = $1`, name)
	}

	round(scopeAll)
	if got := rec.take(); !slices.Equal(got, all) {
		t.Fatalf("first round claimed for %v, want every group", got)
	}
	round(scopeBusy)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("a round with nothing new claimed for idle groups %v", got)
	}
	if d.l.slots.bound.Load() {
		t.Fatal("a round that skipped idle groups with free slots says due jobs wait for slots")
	}

	insert("t07")
	round(roundScope{wake: wire.Wake{Names: []string{"t07"}}})
	if got := rec.take(); !slices.Equal(got, []string{"t07"}) || leased("t07") != 1 {
		t.Fatalf("a wake-up naming t07 claimed for %v and leased %d t07 job(s); want t07's group alone, 1", got, leased("t07"))
	}

	// A job made due with no wake-up naming it (as a retry comes due):
	// the busy group (t07) is claimed for, the idle ones wait for the
	// next full round.
	insert("t03")
	round(scopeBusy)
	if got := rec.take(); !slices.Equal(got, []string{"t07"}) || leased("t03") != 0 {
		t.Fatalf("a round after a freed slot claimed for %v (t03 leased %d); want t07's only", got, leased("t03"))
	}
	d.allAt = time.Time{} // a poll interval passed
	round(scopeBusy)
	if got := rec.take(); !slices.Equal(got, all) || leased("t03") != 1 {
		t.Fatalf("the round a poll interval on claimed for %v (t03 leased %d); want every group", got, leased("t03"))
	}

	// A wake-up for any name (an operator's action, an older submitter)
	// claims for every group.
	round(roundScope{wake: wire.Wake{}})
	if got := rec.take(); !slices.Equal(got, all) {
		t.Fatalf("a wake-up for any name claimed for %v, want every group", got)
	}
}
