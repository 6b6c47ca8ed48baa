package coordinator

import (
	"errors"
	"testing"
)

// TestInFlight: one task at a time, the next started only once the one in
// flight returned, and each task's error seen once, by the wait after it.
func TestInFlight(t *testing.T) {
	var f inFlight
	if err := f.wait(); err != nil {
		t.Fatalf("an idle wait = %v", err)
	}
	release, first := make(chan struct{}), errors.New("first")
	var order []int
	if err := f.start(func() error { <-release; order = append(order, 1); return first }); err != nil {
		t.Fatalf("start on idle = %v", err)
	}
	started := make(chan error)
	go func() {
		started <- f.start(func() error { order = append(order, 2); return nil })
	}()
	close(release) // the second start waits for the first task until here
	if err := <-started; !errors.Is(err, first) {
		t.Errorf("the second start returned %v, want the first task's error", err)
	}
	if err := f.wait(); err != nil {
		t.Errorf("wait after the second task = %v, want nil", err)
	}
	if len(order) != 2 || order[0] != 1 || order[1] != 2 {
		t.Errorf("tasks ran in order %v, want [1 2]", order)
	}
}
