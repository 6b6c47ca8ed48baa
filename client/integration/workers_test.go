package integration_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dtsched/dts/client"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/worker"
)

// TestDrainAndUndrain: with a real leader and worker, a drained worker
// runs none of the jobs submitted after it shows draining, and an undrain
// makes it usable again: the leader reads the cleared flag from PostgreSQL
// at its next worker sync and the waiting job runs.
func TestDrainAndUndrain(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.run(map[string]worker.HandlerFunc{"x": func(context.Context, *worker.Job) (any, error) { return "ok", nil }})
	c := s.client(client.Config{PollInterval: 50 * time.Millisecond})
	ctx := within(t, 30*time.Second)
	waitWorker := func(what string, ok func(*client.Worker) bool) {
		t.Helper()
		testwait.NoError(t, 20*time.Second, "worker w1 "+what, func() error {
			w, err := c.Worker(ctx, "w1")
			if errors.Is(err, client.ErrNotFound) {
				return err
			}
			if err != nil {
				t.Fatal(err)
			}
			if !ok(w) {
				return fmt.Errorf("it is %+v", w)
			}
			return nil
		})
	}
	waitWorker("available", func(w *client.Worker) bool { return w.State == "available" })

	w, err := c.DrainWorker(ctx, "w1")
	if err != nil || w.DrainRequestedAt == nil {
		t.Fatalf("DrainWorker: %+v, %v", w, err)
	}
	waitWorker("draining", func(w *client.Worker) bool { return w.State == "draining" })
	sub, err := c.Submit(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Several worker syncs later (each writes the row's heartbeat), the job
	// still waits: the leader dispatched rounds all along and leased it to
	// no one.
	submitted := time.Now()
	waitWorker("heartbeat 500 ms after the submission", func(w *client.Worker) bool {
		return w.LastHeartbeatAt.After(submitted.Add(500 * time.Millisecond))
	})
	if j, err := c.Get(ctx, sub.JobID); err != nil || j.Status != client.StatusPending {
		t.Fatalf("job submitted to a drained fleet: %+v, %v; want pending", j, err)
	}

	w, err = c.UndrainWorker(ctx, "w1")
	if err != nil || w.DrainRequestedAt != nil || w.DrainRequestedBy != "" {
		t.Fatalf("UndrainWorker: %+v, %v", w, err)
	}
	if j, err := c.Wait(ctx, sub.JobID); err != nil || j.Status != client.StatusCompleted {
		t.Fatalf("after undrain: %+v, %v; want completed", j, err)
	}
	waitWorker("available again", func(w *client.Worker) bool { return w.State == "available" && w.DrainRequestedAt == nil })
	if _, err := c.UndrainWorker(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("UndrainWorker of an unknown worker: %v, want ErrNotFound", err)
	}
}
