package submitter

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestJobNamesCache checks that the workers' names are read at most once
// per jobNamesTTL, and that a failed read serves the last good one.
func TestJobNamesCache(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	loads, fail := 0, false
	types := []string{"a"}
	n := newJobNames(func(context.Context) ([]string, error) {
		loads++
		if fail {
			return nil, errors.New("down")
		}
		return slices.Clone(types), nil
	})
	n.now = func() time.Time { return now }
	ctx := t.Context()

	fail = true
	if _, _, err := n.handled(ctx); err == nil {
		t.Error("no names yet and the read failed: want the error")
	}
	fail = false
	known, sorted, err := n.handled(ctx)
	if err != nil || !known["a"] || !slices.Equal(sorted, []string{"a"}) || loads != 2 {
		t.Fatalf("handled = %v %v %v after %d loads", known, sorted, err, loads)
	}
	types = []string{"a", "b"}
	now = now.Add(jobNamesTTL - time.Millisecond)
	if known, _, _ = n.handled(ctx); known["b"] || loads != 2 {
		t.Errorf("read again within the TTL: %v, %d loads", known, loads)
	}
	now = now.Add(time.Millisecond)
	if known, _, _ = n.handled(ctx); !known["b"] || loads != 3 {
		t.Errorf("not read again after the TTL: %v, %d loads", known, loads)
	}
	fail = true
	now = now.Add(jobNamesTTL)
	if known, _, err = n.handled(ctx); err != nil || !known["b"] || loads != 4 {
		t.Errorf("a failed read: %v, %v, %d loads; want the last good names", known, err, loads)
	}
}
