package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

func TestJobListScheduledAndRunNow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 5, "later", 0)
	// ids[0..3] run in 1..4 hours (ids[3] retrying); ids[4] is due now.
	for i, id := range ids[:4] {
		e.exec(t, `UPDATE jobs SET next_run_at = now() + $2 * interval '1 hour' WHERE id = $1`, id, 4-i)
	}
	e.exec(t, `UPDATE jobs SET status = 'retrying', attempts = 1 WHERE id = $1`, ids[3])
	page, next, err := e.s.JobListScheduled(e.ctx, 3, nil)
	if err != nil || len(page) != 3 || next == nil {
		t.Fatalf("page 1: %d jobs, next %v, %v", len(page), next, err)
	}
	if page[0].ID != ids[3] || page[1].ID != ids[2] || page[2].ID != ids[1] {
		t.Errorf("page 1 order: %d %d %d", page[0].ID, page[1].ID, page[2].ID)
	}
	page, next, err = e.s.JobListScheduled(e.ctx, 3, next)
	if err != nil || len(page) != 1 || next != nil || page[0].ID != ids[0] {
		t.Fatalf("page 2: %v %v %v", page, next, err)
	}
	if err := e.s.JobRunNow(e.ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if j := e.get(t, ids[0]); time.Until(j.NextRunAt) > time.Second {
		t.Errorf("run now left next_run_at at %v", j.NextRunAt)
	}
	for _, id := range []int64{ids[0], ids[4]} { // due already
		if err := e.s.JobRunNow(e.ctx, id); !errors.Is(err, job.ErrConflict) {
			t.Errorf("run now of a due job %d: %v", id, err)
		}
	}
	if err := e.s.JobRunNow(e.ctx, 99999999); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("unknown: %v", err)
	}
	page, _, _ = e.s.JobListScheduled(e.ctx, 10, nil)
	if len(page) != 3 {
		t.Errorf("after run now, %d scheduled, want 3", len(page))
	}
}

func TestWorkerDrain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := e.now(t)
	if err := e.s.WorkerSync(e.ctx, e.epoch, []store.WorkerRow{
		{ID: "w1", Concurrency: 2, State: "available", LastHeartbeatAt: now, Host: "h<1>", Version: "v1.2"},
		{ID: "w2", Concurrency: 2, State: "available", LastHeartbeatAt: now},
	}); err != nil {
		t.Fatal(err)
	}
	w, err := e.s.WorkerDrain(e.ctx, "w1", "apikey:1")
	if err != nil || w.DrainRequestedAt == nil || w.DrainRequestedBy != "apikey:1" || w.Host != "h<1>" || w.Version != "v1.2" {
		t.Fatalf("drain %+v %v", w, err)
	}
	again, err := e.s.WorkerDrain(e.ctx, "w1", "apikey:2")
	if err != nil || again.DrainRequestedBy != "apikey:1" || !again.DrainRequestedAt.Equal(*w.DrainRequestedAt) {
		t.Errorf("a repeated drain changed the first: %+v %v", again, err)
	}
	if _, err := e.s.WorkerDrain(e.ctx, "nope", "x"); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("unknown worker: %v", err)
	}
	ids, err := e.s.WorkerDrainList(e.ctx)
	if err != nil || len(ids) != 1 || ids[0] != "w1" {
		t.Errorf("drain list %v %v", ids, err)
	}
	// The leader's sync keeps the flag.
	if err := e.s.WorkerSync(e.ctx, e.epoch, []store.WorkerRow{{ID: "w1", Concurrency: 2, State: "draining", LastHeartbeatAt: now}}); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.WorkerGet(e.ctx, "w1")
	if err != nil || got.DrainRequestedAt == nil || got.State != "draining" {
		t.Errorf("after sync %+v %v", got, err)
	}
	// An undrain clears the request, so the next sync's WorkerDrainList
	// no longer names the worker; repeating it is harmless.
	for range 2 {
		un, err := e.s.WorkerUndrain(e.ctx, "w1")
		if err != nil || un.DrainRequestedAt != nil || un.DrainRequestedBy != "" || un.ID != "w1" {
			t.Errorf("undrain %+v %v", un, err)
		}
	}
	if ids, err := e.s.WorkerDrainList(e.ctx); err != nil || len(ids) != 0 {
		t.Errorf("drain list after undrain %v %v", ids, err)
	}
	if _, err := e.s.WorkerUndrain(e.ctx, "nope"); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("undrain unknown worker: %v", err)
	}
	// A drain after an undrain is a new request, with its own actor.
	if w, err := e.s.WorkerDrain(e.ctx, "w1", "apikey:3"); err != nil || w.DrainRequestedBy != "apikey:3" {
		t.Errorf("drain after undrain %+v %v", w, err)
	}
	jobs := e.insertN(t, 2, "x", 0)
	e.claimOne(t, jobs[0], "w2")
	leased, err := e.s.WorkerLeasedJobs(e.ctx)
	if err != nil || len(leased) != 1 || len(leased["w2"]) != 1 || leased["w2"][0] != jobs[0] {
		t.Errorf("leased %v %v", leased, err)
	}
}
