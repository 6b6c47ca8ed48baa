package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/client"
	"github.com/dtsched/dts/worker"
)

// TestRequeueWithPayload: a dead job is listed by DLQ, under its queue's
// filter too; requeued with a new payload it runs with it; a payload the
// client cannot encode is never sent, one the server refuses is
// ErrInvalidField, a job not dead ErrConflict, and none of them changes
// the job.
func TestRequeueWithPayload(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.run(map[string]worker.HandlerFunc{
		"picky": func(ctx context.Context, j *worker.Job) (any, error) {
			var p struct{ Fixed bool }
			if err := json.Unmarshal(j.Payload, &p); err != nil || !p.Fixed {
				return nil, worker.Permanent(errors.New("not fixed"))
			}
			return "ok", nil
		},
	})
	c := s.client(client.Config{PollInterval: 100 * time.Millisecond})
	ctx := within(t, 30*time.Second)
	sub, err := c.Submit(ctx, "picky", map[string]bool{"fixed": false}, client.Queue("fixes"))
	if err != nil {
		t.Fatal(err)
	}
	if j, err := c.Wait(ctx, sub.JobID); err != nil || j.Status != client.StatusFailed {
		t.Fatalf("Wait: %+v, %v", j, err)
	}
	dlq, err := c.DLQ(ctx, client.DLQParams{})
	if err != nil || len(dlq.Jobs) != 1 || !strings.Contains(dlq.Jobs[0].Fingerprint, "not fixed") {
		t.Fatalf("DLQ: %+v, %v", dlq, err)
	}
	for q, want := range map[string]int{"fixes": 1, "default": 0} {
		if page, err := c.DLQ(ctx, client.DLQParams{Queue: q}); err != nil || len(page.Jobs) != want {
			t.Errorf("DLQ of queue %s: %+v, %v; want %d jobs", q, page, err, want)
		}
	}
	if _, err := c.DLQ(ctx, client.DLQParams{Queue: "bad name"}); !errors.Is(err, client.ErrInvalidField) {
		t.Errorf("DLQ of queue \"bad name\": %v, want ErrInvalidField", err)
	}
	if _, err := c.RequeueWithPayload(ctx, sub.JobID, json.RawMessage(`{"fixed":`)); err == nil {
		t.Errorf("a payload that is not JSON was sent")
	}
	if _, err := c.RequeueWithPayload(ctx, sub.JobID, json.RawMessage(`"\u0000"`)); !errors.Is(err, client.ErrInvalidField) {
		t.Errorf("a payload jsonb refuses: %v, want ErrInvalidField", err)
	}
	if j, err := c.Get(ctx, sub.JobID); err != nil || j.Status != client.StatusFailed || string(j.Payload) != `{"fixed":false}` {
		t.Fatalf("refused requeues changed the job: %+v, %v", j, err)
	}
	rq, err := c.RequeueWithPayload(ctx, sub.JobID, map[string]any{"fixed": true, "by": "hand"})
	if err != nil || rq.Status != client.StatusPending {
		t.Fatalf("RequeueWithPayload: %+v, %v", rq, err)
	}
	j, err := c.Wait(ctx, sub.JobID)
	if err != nil || j.Status != client.StatusCompleted || string(j.Result) != `"ok"` || len(j.Errors) != 1 {
		t.Errorf("after the requeue: %+v, %v", j, err)
	}
	var p map[string]any
	if json.Unmarshal(j.Payload, &p) != nil || p["by"] != "hand" {
		t.Errorf("payload after the requeue: %s", j.Payload)
	}
	if _, err := c.RequeueWithPayload(ctx, sub.JobID, nil); !errors.Is(err, client.ErrConflict) {
		t.Errorf("requeue a completed job: %v, want ErrConflict", err)
	}
}
