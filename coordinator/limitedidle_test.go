package coordinator

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dtsched/dts/coordinator/internal/registry"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// limitedCounter counts the limited claims.
type limitedCounter struct {
	*store.Store
	limited atomic.Int64
}

func (c *limitedCounter) JobClaimLimited(ctx context.Context, p store.JobClaimLimitedParams) ([]store.Claimed, error) {
	c.limited.Add(1)
	return c.Store.JobClaimLimited(ctx, p)
}

// TestLimitedClaimRestsWhileNothingIsStartable: while limited jobs wait on
// full keys, a limited claim that finds nothing startable is not repeated
// in every round: it costs a pass over every waiting key (thousands in a
// large deployment), which every unlimited job would pay for. It is tried
// again once twenty times its own duration has passed, so it keeps the
// dispatcher busy at most a twentieth of the time while it finds nothing, and
// a key that gets room is served then.
func TestLimitedClaimRestsWhileNothingIsStartable(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rec := &limitedCounter{Store: r.store}
	d := &dispatcher{base: r.b, store: rec, queue: r.queue, limited: true, limitedLoaded: true}
	exec := func(sql string) {
		t.Helper()
		if _, err := r.db.Exec(r.ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO limits (key, concurrency) VALUES ('full', 1)`)
	exec(`INSERT INTO jobs (name, limit_key, status, attempts, lease_token, worker_id, lease_expires_at)
		VALUES ('lim', 'full', 'leased', 1, 7, 'busy', now() + interval '1 hour')`)
	exec(`INSERT INTO jobs (name, limit_key) VALUES ('lim', 'full')`)
	r.insertIn("default", 0, 40)
	g := registry.SlotGroup{Slots: []string{"w", "w", "w", "w"}}
	for round := range 8 {
		got, err := d.claim(r.ctx, g)
		if err != nil || len(got) != 4 {
			t.Fatalf("round %d: claimed %d jobs, %v; want 4 unlimited ones", round, len(got), err)
		}
	}
	if n := rec.limited.Load(); n != 1 {
		t.Errorf("8 rounds ran %d limited claims; want 1 (it found nothing startable)", n)
	}
	// A wake-up for new limited jobs ends the rest: they start at once.
	if n := rec.limited.Load(); n != 1 {
		t.Fatalf("%d limited claims before the wake-up; want 1", n)
	}
	d.woken(wire.Wake{Limited: true})
	if _, err := d.claim(r.ctx, g); err != nil {
		t.Fatal(err)
	}
	if n := rec.limited.Load(); n != 2 {
		t.Errorf("the round after a limited wake-up: %d limited claims in all; want 2", n)
	}
	// Later the key has room: the next round past the rest serves it.
	exec(`UPDATE jobs SET status = 'completed', lease_token = NULL, lease_expires_at = NULL, finished_at = now()
		WHERE worker_id = 'busy'`)
	r.clock.advance(time.Hour)
	got, err := d.claim(r.ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if n := rec.limited.Load(); n != 3 {
		t.Errorf("after the rest: %d limited claims in all; want 3", n)
	}
	limited := 0
	for _, c := range got {
		if c.Name == "lim" {
			limited++
		}
	}
	if limited != 1 {
		t.Errorf("after the rest: %d limited jobs claimed of %v; want the one on the key with room", limited, got)
	}
}
