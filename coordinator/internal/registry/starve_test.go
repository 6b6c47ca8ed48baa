package registry

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/wire"
)

// TestSlotsSmallOfferServesLastGroup: a group whose only name sorts after
// the others' still gets slots when the round's offer is smaller than the
// other groups' free slots (a custom worker beside the built-in ones).
func TestSlotsSmallOfferServesLastGroup(t *testing.T) {
	t.Parallel()
	r := New(3 * time.Second)
	r.Heartbeat(hb("builtin-1", 8, "cpu_intensive", "default", "io_intensive", "noop"), t0)
	r.Heartbeat(hb("builtin-2", 8, "cpu_intensive", "default", "io_intensive", "noop"), t0)
	r.Heartbeat(hb("shout", 1, "zz_shout"), t0)
	var got []string
	for _, g := range r.Slots(4) {
		if slices.Equal(g.Types, []string{"zz_shout"}) {
			got = g.Slots
		}
	}
	if !slices.Equal(got, []string{"shout"}) {
		t.Fatalf("Slots(4) offered the zz_shout group %v, want [shout]: %+v", got, r.Slots(4))
	}
}

// TestSlotsServeEveryGroupProperty checks, over random fleets (1 to 200
// groups, overlapping type sets, "*" workers, drained and gone workers,
// prefetch) and random due jobs, the dispatch rule: after one round, a due
// job whose name a live, non-draining worker with a free slot handles is
// leased, unless a claim that could take it filled every slot it was
// offered (then the round reports more and the next one starts at once).
// A round is simulated as the dispatcher runs it: each group in Slots'
// order claims the due jobs its types take, up to its slots.
func TestSlotsServeEveryGroupProperty(t *testing.T) {
	t.Parallel()
	names := make([]string, 40)
	for i := range names {
		names[i] = fmt.Sprintf("n%02d", i)
	}
	names = append(names, "zz_shout", "a_first", "cpu_intensive")
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		r := New(3 * time.Second)
		groups := 1 + rng.IntN(200)
		if seed%3 == 0 {
			groups = 1 + rng.IntN(5)
		}
		var ws []wire.Heartbeat
		for g := range groups {
			var types []string
			if rng.IntN(10) == 0 {
				types = []string{"*"}
			} else {
				for range 1 + rng.IntN(4) {
					types = append(types, names[rng.IntN(len(names))])
				}
				slices.Sort(types)
				types = slices.Compact(types)
			}
			for i := range 1 + rng.IntN(3) {
				h := hb(fmt.Sprintf("w%03d-%d", g, i), 1+rng.IntN(8), types...)
				h.Prefetch = rng.IntN(3)
				h.Draining = rng.IntN(15) == 0
				ws = append(ws, h)
				r.Heartbeat(h, t0)
				if rng.IntN(15) == 0 {
					r.Stopped(h.WorkerID, t0)
				}
			}
		}
		// Some slots taken.
		for i, h := range ws {
			for j := range rng.IntN(h.Concurrency + 1) {
				r.Assigned(h.WorkerID, int64(i*100+j), 1, t0)
			}
		}
		var due []string
		for range rng.IntN(300) {
			due = append(due, names[rng.IntN(len(names))])
		}
		max := 1 + rng.IntN(64)

		offered := r.Slots(max)
		left := slices.Clone(due)
		filled := map[int]bool{} // group index → claimed every slot offered
		for gi, g := range offered {
			n := 0
			for i := 0; i < len(left) && n < len(g.Slots); {
				if g.Types == nil || slices.Contains(g.Types, left[i]) {
					left = slices.Delete(left, i, i+1)
					n++
					continue
				}
				i++
			}
			filled[gi] = n == len(g.Slots)
		}
		snap := map[string]Worker{}
		for _, w := range r.Snapshot() {
			snap[w.ID] = w
		}
		for _, name := range left {
			for _, w := range snap {
				if w.Gone || w.Draining || w.DrainRequested || w.freeSlots() == 0 ||
					!(slices.Contains(w.Types, "*") || slices.Contains(w.Types, name)) {
					continue
				}
				// The worker's group: its types, or nil for "*".
				gi := slices.IndexFunc(offered, func(g SlotGroup) bool {
					return slices.Equal(g.Types, w.Types) || g.Types == nil && slices.Contains(w.Types, "*")
				})
				if gi < 0 {
					t.Fatalf("seed %d (max %d, %d groups): due job %q left while worker %s (types %v, %d free slots) got no group in the round",
						seed, max, groups, name, w.ID, w.Types, w.freeSlots())
				}
				if !filled[gi] {
					t.Fatalf("seed %d: due job %q left while worker %s's group claimed less than it was offered", seed, name, w.ID)
				}
			}
		}
	}
}
