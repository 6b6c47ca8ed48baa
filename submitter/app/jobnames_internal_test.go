package app

import (
	"context"
	"errors"
	"slices"
	"sync"
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

// TestJobNamesReloadBlocksNoOne: every submission asks for the names; while
// one reloads them (a slow or stalled database), the others are answered
// at once from the last good read instead of queueing behind it.
func TestJobNamesReloadBlocksNoOne(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	var clock sync.Mutex
	entered, unblock := make(chan struct{}), make(chan struct{})
	first := true
	n := newJobNames(func(context.Context) ([]string, error) {
		if first {
			first = false
			return []string{"a"}, nil
		}
		close(entered)
		<-unblock
		return []string{"a", "b"}, nil
	})
	n.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	ctx := t.Context()
	if _, _, err := n.handled(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Lock()
	now = now.Add(jobNamesTTL)
	clock.Unlock()
	reloaded := make(chan map[string]bool)
	go func() { known, _, _ := n.handled(ctx); reloaded <- known }()
	<-entered
	answered := make(chan map[string]bool)
	go func() { known, _, _ := n.handled(ctx); answered <- known }()
	select {
	case known := <-answered:
		if !known["a"] || known["b"] {
			t.Errorf("during the reload: %v; want the last good names", known)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a caller waited for another's reload of the names")
	}
	close(unblock)
	if known := <-reloaded; !known["b"] {
		t.Errorf("the reload returned %v; want the new names", known)
	}
}
