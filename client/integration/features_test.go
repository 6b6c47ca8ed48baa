package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/dtsched/dts/client"
	"github.com/dtsched/dts/worker"
)

// TestUnique: the Unique options reach the server, a repeat answers the
// first job with created false, and bad values are ErrInvalidUnique.
func TestUnique(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	c := s.client(client.Config{})
	ctx := within(t, 30*time.Second)

	first, created, err := c.SubmitResult(ctx, "report", map[string]int{"user": 7}, client.Unique(time.Hour))
	if err != nil || !created {
		t.Fatalf("first: %+v, created %v, %v", first, created, err)
	}
	again, created, err := c.SubmitResult(ctx, "report", json.RawMessage(`{ "user": 7 }`), client.Unique(time.Minute))
	if err != nil || created || again.JobID != first.JobID {
		t.Fatalf("repeat: %+v, created %v, %v; want job %s not created", again, created, err, first.JobID)
	}
	// UniqueKey ignores the payload; UniqueStates without completed frees
	// the key once the first job completes.
	opts := []client.Option{client.Unique(time.Hour), client.UniqueKey("customer-7"),
		client.UniqueStates(client.StatusPending, client.StatusLeased, client.StatusRetrying)}
	a, err := c.Submit(ctx, "sync", 1, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := c.Submit(ctx, "sync", 2, opts...); err != nil || b.JobID != a.JobID {
		t.Fatalf("same unique key: %+v, %v; want job %s", b, err, a.JobID)
	}
	// Batches take the options too: a repeat inside the batch is one job.
	subs, err := c.SubmitBatch(ctx, []client.Request{
		{Name: "report", Payload: map[string]int{"user": 7}, Options: []client.Option{client.Unique(time.Hour)}},
		{Name: "report", Payload: map[string]int{"user": 8}, Options: []client.Option{client.Unique(time.Hour)}},
		{Name: "report", Payload: map[string]int{"user": 8}, Options: []client.Option{client.Unique(time.Hour)}},
	})
	if err != nil || subs[0].JobID != first.JobID || subs[1].JobID == first.JobID || subs[2].JobID != subs[1].JobID {
		t.Fatalf("batch: %+v, %v", subs, err)
	}

	for name, opts := range map[string][]client.Option{
		"zero window":   {client.Unique(0)},
		"too long":      {client.Unique(31 * 24 * time.Hour)},
		"unknown state": {client.Unique(time.Minute), client.UniqueStates("done")},
		"key alone":     {client.UniqueKey("k")},
	} {
		if _, err := c.Submit(ctx, "report", nil, opts...); !errors.Is(err, client.ErrInvalidUnique) {
			t.Errorf("%s: %v, want ErrInvalidUnique", name, err)
		}
	}
}

// TestDependsOnAndCallback: DependsOn, DependsOnIndex and a batch callback
// reach the server; the callback runs after the batch with its outcomes.
func TestDependsOnAndCallback(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	got := make(chan json.RawMessage, 1)
	s.run(map[string]worker.HandlerFunc{
		"ok":   func(context.Context, *worker.Job) (any, error) { return "done", nil },
		"fail": func(context.Context, *worker.Job) (any, error) { return nil, worker.Permanent(errors.New("bad input")) },
		"notify": func(_ context.Context, j *worker.Job) (any, error) {
			got <- j.Payload
			return nil, nil
		},
	})
	c := s.client(client.Config{PollInterval: 50 * time.Millisecond})
	ctx := within(t, 30*time.Second)

	if _, err := c.Submit(ctx, "ok", nil, client.DependsOn("999999")); !errors.Is(err, client.ErrUnknownDependency) {
		t.Fatalf("unknown parent: %v, want ErrUnknownDependency", err)
	}
	parent, err := c.Submit(ctx, "ok", nil, client.Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	child, err := c.Submit(ctx, "ok", nil, client.DependsOn(parent.JobID))
	if err != nil || child.Status != client.StatusWaiting {
		t.Fatalf("child: %+v, %v; want waiting", child, err)
	}
	if _, err := c.Cancel(ctx, parent.JobID); err != nil {
		t.Fatal(err)
	}
	if j, err := c.Wait(ctx, child.JobID); err != nil || j.Status != client.StatusCanceled {
		t.Fatalf("child of a canceled parent: %+v, %v", j, err)
	}

	jobs, cb, err := c.SubmitBatchCallback(ctx, []client.Request{
		{Name: "ok"},
		{Name: "fail", Options: []client.Option{client.DependsOnIndex(0), client.MaxRetries(0)}},
	}, client.Request{Name: "notify", Payload: map[string]string{"to": "ops"}})
	if err != nil || len(jobs) != 2 || jobs[1].Status != client.StatusWaiting || cb.Status != client.StatusWaiting {
		t.Fatalf("batch with callback: %+v, %+v, %v", jobs, cb, err)
	}
	if j, err := c.Wait(ctx, cb.JobID); err != nil || j.Status != client.StatusCompleted {
		t.Fatalf("callback: %+v, %v", j, err)
	}
	var payload struct {
		Payload map[string]string `json:"payload"`
		Jobs    []struct {
			JobID  string `json:"job_id"`
			Status string `json:"status"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(<-got, &payload); err != nil {
		t.Fatal(err)
	}
	if payload.Payload["to"] != "ops" || len(payload.Jobs) != 2 || payload.Jobs[0].JobID != jobs[0].JobID ||
		payload.Jobs[0].Status != client.StatusCompleted || payload.Jobs[1].Status != client.StatusFailed {
		t.Errorf("callback payload: %+v", payload)
	}
}

// TestSchedules: every /schedules call of the client against a submitter.
func TestSchedules(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	c := s.client(client.Config{})
	ctx := within(t, 30*time.Second)

	sc, err := c.CreateSchedule(ctx, client.ScheduleSpec{Name: "nightly", Cron: "30 2 * * *", TimeZone: "Europe/Paris",
		Job:     client.Request{Name: "report", Payload: map[string]string{"kind": "daily"}, Options: []client.Option{client.MaxRetries(1)}},
		Overlap: client.OverlapAllow})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "nightly" || sc.Job.Name != "report" || sc.Job.MaxRetries != 1 || sc.Overlap != client.OverlapAllow ||
		sc.CatchUp != client.CatchUpOne || sc.Paused || sc.NextFireAt == nil {
		t.Errorf("created: %+v", sc)
	}
	if _, err := c.CreateSchedule(ctx, client.ScheduleSpec{Name: "nightly", Cron: "@daily", Job: client.Request{Name: "x"}}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("same name: %v, want ErrConflict", err)
	}
	if _, err := c.CreateSchedule(ctx, client.ScheduleSpec{Name: "u", Cron: "@daily",
		Job: client.Request{Name: "x", Options: []client.Option{client.Unique(time.Minute)}}}); !errors.Is(err, client.ErrInvalidUnique) {
		t.Errorf("unique template: %v, want ErrInvalidUnique", err)
	}
	if _, err := c.CreateSchedule(ctx, client.ScheduleSpec{Name: "other", Cron: "@hourly", Job: client.Request{Name: "x"}}); err != nil {
		t.Fatal(err)
	}

	got, err := c.Schedule(ctx, sc.ScheduleID)
	if err != nil || got.Name != "nightly" || got.TimeZone != "Europe/Paris" {
		t.Errorf("Schedule: %+v, %v", got, err)
	}
	page, err := c.Schedules(ctx, client.ScheduleListParams{Limit: 1})
	if err != nil || len(page.Schedules) != 1 || page.Schedules[0].Name != "other" || page.NextCursor == nil {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	page, err = c.Schedules(ctx, client.ScheduleListParams{Limit: 1, Cursor: *page.NextCursor})
	if err != nil || len(page.Schedules) != 1 || page.Schedules[0].Name != "nightly" || page.NextCursor != nil {
		t.Fatalf("second page: %+v, %v", page, err)
	}

	if p, err := c.PauseSchedule(ctx, sc.ScheduleID); err != nil || !p.Paused || p.NextFireAt != nil {
		t.Errorf("paused: %+v, %v", p, err)
	}
	if p, err := c.ResumeSchedule(ctx, sc.ScheduleID); err != nil || p.Paused || p.NextFireAt == nil {
		t.Errorf("resumed: %+v, %v", p, err)
	}
	sub, err := c.TriggerSchedule(ctx, sc.ScheduleID)
	if err != nil {
		t.Fatal(err)
	}
	if j, err := c.Get(ctx, sub.JobID); err != nil || j.Name != "report" || j.MaxRetries != 1 {
		t.Errorf("triggered job: %+v, %v", j, err)
	}
	if d, err := c.DeleteSchedule(ctx, sc.ScheduleID); err != nil || d.Name != "nightly" {
		t.Errorf("deleted: %+v, %v", d, err)
	}
	if _, err := c.Schedule(ctx, sc.ScheduleID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("after delete: %v, want ErrNotFound", err)
	}
	if _, err := c.TriggerSchedule(ctx, sc.ScheduleID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("trigger after delete: %v, want ErrNotFound", err)
	}
}

// TestLimits: SetLimit, Limits and DeleteLimit over the real routes; the
// ConcurrencyKey option reaches the server (the job shows its limit_key);
// a bad limit is ErrInvalidLimit, a missing one ErrNotFound.
func TestLimits(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	c := s.client(client.Config{})
	ctx := within(t, 30*time.Second)

	l, err := c.SetLimit(ctx, "tenant-7", 5, 100, time.Minute)
	if err != nil || l.Key != "tenant-7" || l.Concurrency != 5 || l.Rate != 100 || l.PeriodSeconds != 60 {
		t.Fatalf("SetLimit = %+v, %v", l, err)
	}
	if _, err := c.SetLimit(ctx, client.NameLimitKey("report"), 2, 0, 0); err != nil {
		t.Fatal(err)
	}
	keyed, err := c.Submit(ctx, "sync", nil, client.ConcurrencyKey("tenant-7"))
	if err != nil {
		t.Fatal(err)
	}
	named, err := c.Submit(ctx, "report", nil)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{keyed.JobID: "tenant-7", named.JobID: "name:report"} {
		if j, err := c.Get(ctx, id); err != nil || j.LimitKey != want {
			t.Errorf("job %s: %+v, %v; want limit_key %q", id, j, err, want)
		}
	}
	ls, err := c.Limits(ctx)
	if err != nil || len(ls) != 2 || ls[0].Key != "name:report" || ls[1].Key != "tenant-7" || ls[1].Waiting != 1 {
		t.Fatalf("Limits = %+v, %v", ls, err)
	}
	if err := c.DeleteLimit(ctx, "tenant-7"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteLimit(ctx, "tenant-7"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("second DeleteLimit: %v, want ErrNotFound", err)
	}
	if _, err := c.SetLimit(ctx, "k", 0, 5, 0); !errors.Is(err, client.ErrInvalidLimit) {
		t.Errorf("a rate without a period: %v, want ErrInvalidLimit", err)
	}
}
