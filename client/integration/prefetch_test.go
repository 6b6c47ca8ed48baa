package integration_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dtsched/dts/client"
	"github.com/dtsched/dts/coordinator"
	"github.com/dtsched/dts/devcluster"
	"github.com/dtsched/dts/worker"
)

// TestPrefetchedJobKeepsItsLeaseUntilItStarts: a job with timeout_seconds
// that waits for a slot behind a long one (a worker of one slot that
// prefetches) keeps its lease until its handler starts, and its time limit
// counts from then: it runs once and completes, though it waited longer
// than its time limit plus a lease.
func TestPrefetchedJobKeepsItsLeaseUntilItStarts(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	const lease = time.Second
	long := 2*lease + time.Second // the second job's timeout (1 s) + a lease, and a second more
	started := make(chan struct{})
	var quickRuns atomic.Int32
	s.runWith(coordinator.Config{LeaseDuration: lease}, worker.Config{Concurrency: 1, Prefetch: 1},
		map[string]worker.HandlerFunc{
			"long": func(ctx context.Context, j *worker.Job) (any, error) {
				close(started)
				select {
				case <-time.After(long):
					return nil, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			},
			"quick": func(ctx context.Context, j *worker.Job) (any, error) {
				quickRuns.Add(1)
				return nil, nil
			},
		})
	c := s.client(client.Config{PollInterval: 100 * time.Millisecond})
	ctx := within(t, 30*time.Second)

	first, err := c.Submit(ctx, "long", nil, client.MaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the long job never started")
	}
	second, err := c.Submit(ctx, "quick", nil, client.Timeout(time.Second), client.MaxRetries(3))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{first.JobID, second.JobID} {
		j, err := c.Wait(ctx, id)
		if err != nil {
			t.Fatalf("Wait %s: %v", id, err)
		}
		if j.Status != client.StatusCompleted || j.Attempts != 1 {
			t.Errorf("job %s (%s): status %s after %d attempts, errors %+v; want completed after 1",
				id, j.Name, j.Status, j.Attempts, j.Errors)
		}
	}
	if n := quickRuns.Load(); n != 1 {
		t.Errorf("the prefetched job ran %d times, want once", n)
	}
}

// runWith is run with a coordinator and a worker configured by co and wo
// beyond what every test here sets.
func (s *stack) runWith(co coordinator.Config, wo worker.Config, handlers map[string]worker.HandlerFunc) {
	s.t.Helper()
	s.h.Run(devcluster.Services{
		Coordinator: func(c *coordinator.Config) { c.LeaseDuration = co.LeaseDuration },
		Worker:      func(w *worker.Config) { w.Concurrency, w.Prefetch = wo.Concurrency, wo.Prefetch },
		Handlers:    handlers,
	})
}
