package e2e

import (
	"sync"
	"testing"
)

// together runs f on each item as a subtest named by name, at most n at
// a time, each started from a goroutine of its own, and returns when all
// have ended. Parallel subtests (t.Parallel) would wait for free slots of
// -parallel behind every other test of the package, while the cluster
// their parent started sits idle and spends CPU that the running tests
// need; these take no slot.
func together[T any](t *testing.T, items []T, n int, name func(T) string, f func(*testing.T, T)) {
	t.Helper()
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(name(it), func(t *testing.T) { f(t, it) })
		})
	}
	wg.Wait()
}
