// Package startstoptest checks that a startstop.Service keeps the
// lifecycle's promises under concurrent use.
package startstoptest

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dtsched/dts/internal/startstop"
)

// Stress starts and stops svc from several goroutines at once, many times,
// then stops it and checks that every call returned within a bound and
// that no goroutine the service started is left. The caller's own
// goroutines, started before Stress, are not counted.
func Stress(t testing.TB, svc startstop.Service) {
	t.Helper()
	const (
		goroutines = 8
		rounds     = 50
		bound      = 10 * time.Second
	)
	ignore := goleak.IgnoreCurrent()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for i := range rounds {
					if i%2 == 0 {
						_ = svc.Start(ctx)
					} else {
						svc.Stop()
					}
				}
			})
		}
		wg.Wait()
		svc.Stop()
	}()
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatalf("starting and stopping %T from %d goroutines did not end within %v", svc, goroutines, bound)
	}
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("%T left goroutines after its last Stop: %v", svc, err)
	}
}
