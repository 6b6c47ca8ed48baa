package coordinator

import (
	"fmt"
	"slices"
	"testing"

	"github.com/dtsched/dts/internal/store"
)

func TestNextClaimSize(t *testing.T) {
	for _, c := range []struct {
		name                          string
		size, offered, claimed, limit int
		filled                        bool
		want                          int
	}{
		{"a backlog grows the offer eightfold", 32, 32, 32, 1000, true, 256},
		{"then to the claim batch", 256, 256, 256, 1000, true, 1000},
		{"and no further", 1000, 1000, 1000, 1000, true, 1000},
		{"a group that filled grows it even if another did not", 256, 256, 100, 1000, true, 1000},
		{"a trickle shrinks it to four times the claim", 1000, 1000, 50, 1000, false, 200},
		{"but not below the minimum", 1000, 1000, 2, 1000, false, minClaimSize},
		{"nor for an empty round", 256, 256, 0, 1000, false, minClaimSize},
		{"no free slot keeps it", 1000, 0, 0, 1000, false, 1000},
		{"a backlog the fleet's few free slots filled grows it", 32, 5, 5, 1000, true, 256},
		{"a claim batch below the minimum caps it", 8, 8, 2, 8, false, 8},
	} {
		if got := nextClaimSize(c.size, c.offered, c.claimed, c.filled, c.limit); got != c.want {
			t.Errorf("%s: nextClaimSize(%d, %d, %d, %v, %d) = %d, want %d",
				c.name, c.size, c.offered, c.claimed, c.filled, c.limit, got, c.want)
		}
	}
}

// limitShare: the first claim gets half the slots (rounded up), the second
// what the first left, the first what the second left if it filled its
// half; each claim's jobs take the slots in order.
func TestLimitShare(t *testing.T) {
	// claimer offers up to avail jobs, named by its tag, and records the
	// slots it was offered.
	type claimer struct {
		tag     string
		avail   int
		offered []int
	}
	claim := func(c *claimer) func([]string) ([]store.Claimed, error) {
		return func(slots []string) ([]store.Claimed, error) {
			c.offered = append(c.offered, len(slots))
			n := min(c.avail, len(slots))
			c.avail -= n
			out := make([]store.Claimed, n)
			for i := range out {
				out[i] = store.Claimed{Name: c.tag, WorkerID: slots[i]}
			}
			return out, nil
		}
	}
	for _, c := range []struct {
		name         string
		slots        int
		first, other int // jobs each has due
		wantFirst    []int
		wantOther    []int
		gotF, gotO   int
	}{
		{"both plenty: half each", 10, 100, 100, []int{5}, []int{5}, 5, 5},
		{"odd: the first gets the larger half", 7, 100, 100, []int{4}, []int{3}, 4, 3},
		{"first short: the other gets the rest", 10, 2, 100, []int{5}, []int{8}, 2, 8},
		{"other short: the first gets the rest", 10, 100, 1, []int{5, 4}, []int{5}, 9, 1},
		{"both short: no third claim", 10, 3, 1, []int{5}, []int{7}, 3, 1},
		{"one slot: the first takes it", 1, 100, 100, []int{1}, []int{0}, 1, 0},
		{"one slot, first has nothing", 1, 0, 100, []int{1}, []int{1}, 0, 1},
	} {
		f, o := &claimer{tag: "f", avail: c.first}, &claimer{tag: "o", avail: c.other}
		slots := make([]string, c.slots)
		for i := range slots {
			slots[i] = fmt.Sprint(i)
		}
		got, err := limitShare(slots, claim(f), claim(o))
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for i, j := range got {
			n[j.Name]++
			if j.WorkerID != slots[i] {
				t.Errorf("%s: job %d went to slot %s; want %s", c.name, i, j.WorkerID, slots[i])
			}
		}
		if !slices.Equal(f.offered, c.wantFirst) || !slices.Equal(o.offered, c.wantOther) || n["f"] != c.gotF || n["o"] != c.gotO {
			t.Errorf("%s: offered first %v, other %v; got %d and %d; want %v, %v, %d, %d",
				c.name, f.offered, o.offered, n["f"], n["o"], c.wantFirst, c.wantOther, c.gotF, c.gotO)
		}
	}
}
