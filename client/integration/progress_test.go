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

// TestProgress: a handler's progress reaches GET /jobs/{id} through the
// results stream and the leader, while the attempt runs; the latest of a
// burst wins, and the last report stays after completion.
func TestProgress(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	seen := make(chan struct{})
	s.run(map[string]worker.HandlerFunc{
		"long": func(ctx context.Context, j *worker.Job) (any, error) {
			if err := j.Progress(ctx, 101, "too far"); err == nil {
				t.Error("Progress(101) accepted")
			}
			for pct := range 51 { // a burst: throttled, the latest (50) wins
				if err := j.Progress(ctx, pct, "half way\x00 there"); err != nil {
					return nil, err
				}
			}
			select {
			case <-seen:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			_ = j.Progress(ctx, 100, "done")
			return "ok", nil
		},
	})
	c := s.client(client.Config{PollInterval: 50 * time.Millisecond})
	ctx := within(t, 30*time.Second)
	sub, err := c.Submit(ctx, "long", nil)
	if err != nil {
		t.Fatal(err)
	}
	var running *client.Job
	testwait.NoError(t, 20*time.Second, "progress to reach 50", func() error {
		var err error
		if running, err = c.Get(ctx, sub.JobID); err != nil {
			t.Fatal(err)
		}
		if running.Progress != nil && *running.Progress == 50 {
			return nil
		}
		if running.Progress != nil && *running.Progress != 0 {
			t.Logf("progress %d", *running.Progress)
		}
		return fmt.Errorf("it is %+v", running)
	})
	if running.Status != client.StatusLeased || running.ProgressMessage == nil || *running.ProgressMessage != "half way there" {
		t.Errorf("while running: status %s, message %v", running.Status, running.ProgressMessage)
	}
	close(seen)
	j, err := c.Wait(ctx, sub.JobID)
	if err != nil || j.Status != client.StatusCompleted {
		t.Fatalf("Wait: %+v, %v", j, err)
	}
	// The report of 100 went ahead of the result on the stream, throttled
	// or not.
	if j.Progress == nil || *j.Progress != 100 || *j.ProgressMessage != "done" {
		t.Errorf("after completion: progress %v", j.Progress)
	}
	// Client.Progress reads the same report.
	p, err := c.Progress(ctx, sub.JobID)
	if err != nil || p.Status != client.StatusCompleted || p.Percent == nil || *p.Percent != 100 || p.Message != "done" {
		t.Errorf("Progress = %+v, %v; want completed, 100, done", p, err)
	}
	if _, err := c.Progress(ctx, "999999"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Progress of an unknown job: %v, want ErrNotFound", err)
	}
	// A job no handler reported on has no progress.
	other, err := c.Submit(ctx, "nobody_handles_this", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := c.Progress(ctx, other.JobID); err != nil || p.Percent != nil || p.Message != "" || p.Status != client.StatusPending {
		t.Errorf("Progress of a pending job: %+v, %v", p, err)
	}
}
