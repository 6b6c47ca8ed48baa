package coordinator

import "testing"

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
