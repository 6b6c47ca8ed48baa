package queue

import "testing"

// TestMergeWake: a wake-up put where one is pending merges into it, and is
// limited if either was.
func TestMergeWake(t *testing.T) {
	for _, c := range []struct {
		pending, put, want bool
		empty              bool
	}{
		{empty: true, put: false, want: false},
		{empty: true, put: true, want: true},
		{pending: false, put: false, want: false},
		{pending: false, put: true, want: true},
		{pending: true, put: false, want: true},
	} {
		out := make(chan bool, 1)
		if !c.empty {
			out <- c.pending
		}
		mergeWake(out, c.put)
		if got := <-out; got != c.want || len(out) != 0 {
			t.Errorf("pending %v (empty %v), put %v: got %v and %d more; want %v alone", c.pending, c.empty, c.put, got, len(out), c.want)
		}
	}
}
