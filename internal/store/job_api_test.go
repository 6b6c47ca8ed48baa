package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
)

func TestJobInsertSingle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := e.now(t)
	res, err := e.s.JobInsert(e.ctx, []store.JobInsertParams{{
		Name: "email.send", Priority: 7, Payload: json.RawMessage(`{"to": "a@b.c", "n": [1, 2]}`),
		MaxRetries: 2, TimeoutSeconds: 30,
	}})
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	if len(res) != 1 || res[0].ID <= 0 || !res[0].Created {
		t.Fatalf("insert = %+v, want one created job", res)
	}
	j := e.get(t, res[0].ID)
	if j.Name != "email.send" || j.Queue != "default" || j.Priority != 7 || j.MaxRetries != 2 || j.TimeoutSeconds != 30 {
		t.Errorf("job = %+v, fields differ from the insert", j)
	}
	if j.State != job.StatePending || j.Attempts != 0 || j.LeaseToken != 0 || j.WorkerID != "" || j.IdempotencyKey != "" {
		t.Errorf("job = %+v, want a fresh pending job", j)
	}
	if !jsonEqual(t, j.Payload, []byte(`{"n":[1,2],"to":"a@b.c"}`)) {
		t.Errorf("payload = %s", j.Payload)
	}
	if len(j.Errors) != 0 || j.Result != nil || j.StartedAt != nil || j.FinishedAt != nil {
		t.Errorf("job = %+v, want no errors, result or times", j)
	}
	if j.NextRunAt.Before(before) || j.NextRunAt.After(e.now(t)) {
		t.Errorf("next_run_at = %v, want the insert's now (after %v)", j.NextRunAt, before)
	}

	// No payload is stored as JSON null, a named queue is kept.
	ids := e.insert(t, store.JobInsertParams{Name: "x", Queue: "bulk"})
	j = e.get(t, ids[0])
	if string(j.Payload) != "null" || j.Queue != "bulk" {
		t.Errorf("payload %s queue %q, want null and bulk", j.Payload, j.Queue)
	}
}

func TestJobInsertBatchKeepsInputOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 300
	ps := make([]store.JobInsertParams, n)
	for i := range ps {
		// Names and priorities that do not sort like the input.
		ps[i] = store.JobInsertParams{Name: fmt.Sprintf("job-%03d", (i*37)%n), Priority: -i,
			Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
	}
	ids := e.insert(t, ps...)
	if !slices.IsSorted(ids) {
		t.Errorf("ids are not in input order: %v", ids)
	}
	for i, id := range ids {
		j := e.get(t, id)
		if j.Name != ps[i].Name || j.Priority != ps[i].Priority || !jsonEqual(t, j.Payload, ps[i].Payload) {
			t.Fatalf("result %d is job %d = %s/%d/%s, want %s/%d/%s", i, id, j.Name, j.Priority, j.Payload,
				ps[i].Name, ps[i].Priority, ps[i].Payload)
		}
	}
	var count int
	e.scalar(t, &count, `SELECT count(*) FROM jobs`)
	if count != n {
		t.Errorf("%d rows, want %d", count, n)
	}
}

func TestJobInsertIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first, err := e.s.JobInsert(e.ctx, []store.JobInsertParams{{Name: "a", IdempotencyKey: "k1", Payload: json.RawMessage(`1`)}})
	if err != nil || len(first) != 1 || !first[0].Created {
		t.Fatalf("first insert = %+v, %v", first, err)
	}
	again, err := e.s.JobInsert(e.ctx, []store.JobInsertParams{{Name: "b", IdempotencyKey: "k1", Payload: json.RawMessage(`2`)}})
	if err != nil {
		t.Fatalf("second insert: %v", err)
	}
	if len(again) != 1 || again[0].ID != first[0].ID || again[0].Created {
		t.Errorf("second insert = %+v, want id %d not created", again, first[0].ID)
	}
	var rows int
	e.scalar(t, &rows, `SELECT count(*) FROM jobs WHERE idempotency_key = 'k1'`)
	if rows != 1 {
		t.Errorf("%d rows with key k1, want 1", rows)
	}
	if j := e.get(t, first[0].ID); j.Name != "a" || string(j.Payload) != "1" || j.IdempotencyKey != "k1" {
		t.Errorf("job = %s %s %q, the second insert must not change it", j.Name, j.Payload, j.IdempotencyKey)
	}

	// The same key twice in one batch creates one job, reported once as created.
	dup, err := e.s.JobInsert(e.ctx, []store.JobInsertParams{{Name: "c", IdempotencyKey: "k2"}, {Name: "d", IdempotencyKey: "k2"}})
	if err != nil {
		t.Fatalf("batch with a repeated key: %v", err)
	}
	if dup[0].ID != dup[1].ID || !dup[0].Created || dup[1].Created {
		t.Errorf("batch with a repeated key = %+v, want one id, created then not", dup)
	}
	e.scalar(t, &rows, `SELECT count(*) FROM jobs WHERE idempotency_key = 'k2'`)
	if rows != 1 {
		t.Errorf("%d rows with key k2, want 1", rows)
	}
}

func TestJobInsertIdempotentConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 8
	results := make([]store.JobInsertResult, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			res, err := e.s.JobInsert(e.ctx, []store.JobInsertParams{{Name: "race", IdempotencyKey: "same"}, {Name: "free"}})
			errs[i] = err
			if err == nil {
				results[i] = res[0]
			}
		})
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("insert %d: %v", i, errs[i])
		}
		if results[i].ID != results[0].ID {
			t.Errorf("insert %d got id %d, insert 0 got %d", i, results[i].ID, results[0].ID)
		}
		if results[i].Created {
			created++
		}
	}
	if created != 1 {
		t.Errorf("%d inserts report creating the keyed job, want 1", created)
	}
	var keyed, free int
	e.scalar(t, &keyed, `SELECT count(*) FROM jobs WHERE idempotency_key = 'same'`)
	e.scalar(t, &free, `SELECT count(*) FROM jobs WHERE name = 'free'`)
	if keyed != 1 || free != n {
		t.Errorf("%d keyed and %d unkeyed rows, want 1 and %d", keyed, free, n)
	}
}

func TestJobInsertMixedBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	old := e.insert(t, store.JobInsertParams{Name: "old", IdempotencyKey: "a"})[0]
	ps := []store.JobInsertParams{
		{Name: "u1"},
		{Name: "dup", IdempotencyKey: "a"},
		{Name: "u2"},
		{Name: "kb", IdempotencyKey: "b"},
		{Name: "u3"},
		{Name: "kc", IdempotencyKey: "c"},
	}
	res, err := e.s.JobInsert(e.ctx, ps)
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	wantCreated := []bool{true, false, true, true, true, true}
	for i, r := range res {
		if r.Created != wantCreated[i] {
			t.Errorf("result %d (%s) created = %v, want %v", i, ps[i].Name, r.Created, wantCreated[i])
		}
		if !r.Created {
			if r.ID != old {
				t.Errorf("result %d = id %d, want the earlier job %d", i, r.ID, old)
			}
			continue
		}
		if j := e.get(t, r.ID); j.Name != ps[i].Name || j.IdempotencyKey != ps[i].IdempotencyKey {
			t.Errorf("result %d = job %d %s/%q, want %s/%q", i, r.ID, j.Name, j.IdempotencyKey, ps[i].Name, ps[i].IdempotencyKey)
		}
	}
	if !(res[0].ID < res[2].ID && res[2].ID < res[4].ID) {
		t.Errorf("unkeyed ids %d %d %d not in input order", res[0].ID, res[2].ID, res[4].ID)
	}
	var rows int
	e.scalar(t, &rows, `SELECT count(*) FROM jobs`)
	if rows != 6 {
		t.Errorf("%d rows, want 6", rows)
	}
}

func TestJobInsertRunAtAndDelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := e.now(t)
	runAt := now.Add(time.Hour).Truncate(time.Microsecond)
	past := now.Add(-time.Minute).Truncate(time.Microsecond)
	ids := e.insert(t,
		store.JobInsertParams{Name: "at", RunAt: &runAt},
		store.JobInsertParams{Name: "delayed", Delay: 30 * time.Minute},
		store.JobInsertParams{Name: "past", RunAt: &past},
		// RunAt wins over Delay.
		store.JobInsertParams{Name: "both", RunAt: &past, Delay: time.Hour},
	)
	if got := e.get(t, ids[0]).NextRunAt; !got.Equal(runAt) {
		t.Errorf("RunAt job next_run_at = %v, want %v", got, runAt)
	}
	within(t, "Delay job next_run_at", e.get(t, ids[1]).NextRunAt, now.Add(30*time.Minute), 5*time.Second)
	if got := e.get(t, ids[3]).NextRunAt; !got.Equal(past) {
		t.Errorf("RunAt+Delay job next_run_at = %v, want RunAt %v", got, past)
	}

	got := e.claim(t, nil, "w", "w", "w", "w")
	if _, ok := got[ids[2]]; !ok || len(got) != 2 {
		t.Errorf("claimed %v, want only the due jobs %d and %d", keys(got), ids[2], ids[3])
	}
}

func TestJobCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 4, "c", 3)
	// Claims go in id order: the first three are leased, the last stays pending.
	retrying, leased, completed, pending := ids[0], ids[1], ids[2], ids[3]
	cs := e.claim(t, nil, "w-r", "w-l", "w-c")
	e.fail(t, fixedPolicy(time.Hour), store.Failure{ID: retrying, LeaseToken: cs[retrying].LeaseToken, WorkerID: cs[retrying].WorkerID, Error: "x", Reason: job.ReasonError})
	if _, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{{ID: completed, LeaseToken: cs[completed].LeaseToken, WorkerID: cs[completed].WorkerID}}); err != nil {
		t.Fatal(err)
	}

	for _, id := range []int64{pending, retrying} {
		res, err := e.s.JobCancel(e.ctx, id)
		if err != nil {
			t.Fatalf("cancel %d: %v", id, err)
		}
		if res.State != job.StateCanceled || res.WorkerID != "" || res.LeaseToken != 0 {
			t.Errorf("cancel %d = %+v, want canceled", id, res)
		}
		if j := e.get(t, id); j.State != job.StateCanceled || j.FinishedAt == nil {
			t.Errorf("job %d is %s (finished %v), want canceled with finished_at", id, j.State, j.FinishedAt)
		}
	}

	res, err := e.s.JobCancel(e.ctx, leased)
	if err != nil {
		t.Fatalf("cancel leased: %v", err)
	}
	want := store.CancelResult{State: job.StateLeased, WorkerID: "w-l", LeaseToken: cs[leased].LeaseToken}
	if res != want {
		t.Errorf("cancel leased = %+v, want %+v", res, want)
	}
	if j := e.get(t, leased); j.State != job.StateLeased || !j.CancelRequest || j.LeaseToken != cs[leased].LeaseToken {
		t.Errorf("leased job after cancel = %s cancel_requested %v token %d", j.State, j.CancelRequest, j.LeaseToken)
	}

	for _, id := range []int64{completed, pending} { // completed, and already canceled
		if _, err := e.s.JobCancel(e.ctx, id); !errors.Is(err, job.ErrConflict) {
			t.Errorf("cancel final job %d: %v, want ErrConflict", id, err)
		}
	}
	if _, err := e.s.JobCancel(e.ctx, 1_000_000); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("cancel unknown job: %v, want ErrNotFound", err)
	}
	if got := e.claim(t, nil, "w"); len(got) != 0 {
		t.Errorf("claimed canceled jobs %v", keys(got))
	}
}

func TestJobRequeueDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 2, "r", 3)
	dead, other := ids[0], ids[1]
	c := e.claimOne(t, dead, "w")
	e.fail(t, noRetryPolicy(t), store.Failure{ID: dead, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID, Error: "bad input", Reason: job.ReasonPermanent, Permanent: true})

	if err := e.s.JobRequeueDead(e.ctx, dead, nil); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	j := e.get(t, dead)
	if j.State != job.StatePending || j.Attempts != 0 || j.FinishedAt != nil || j.CancelRequest {
		t.Errorf("requeued job = %+v, want pending with attempts 0", j)
	}
	if len(j.Errors) != 1 || j.Errors[0].Error != "bad input" {
		t.Errorf("errors = %+v, want the history kept", j.Errors)
	}
	var reason *string
	e.scalar(t, &reason, `SELECT dead_reason FROM jobs WHERE id = $1`, dead)
	if reason != nil {
		t.Errorf("dead_reason = %q, want NULL", *reason)
	}
	// Requeued now, it comes after the job that waited since the insert.
	if c := e.claim(t, nil, "w", "w"); len(c) != 2 || c[dead].Attempt != 1 {
		t.Errorf("claim after requeue = %+v, want the requeued job at attempt 1", c)
	}

	if err := e.s.JobRequeueDead(e.ctx, other, nil); !errors.Is(err, job.ErrConflict) {
		t.Errorf("requeue a leased job: %v, want ErrConflict", err)
	}
	if err := e.s.JobRequeueDead(e.ctx, 1_000_000, nil); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("requeue an unknown job: %v, want ErrNotFound", err)
	}
}

func TestDeadList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 3, "d", 0)
	cs := e.claim(t, nil, "w", "w", "w")
	e.fail(t, noRetryPolicy(t), store.Failure{ID: ids[0], LeaseToken: cs[ids[0]].LeaseToken, WorkerID: cs[ids[0]].WorkerID, Error: "e0", Reason: job.ReasonError})
	e.fail(t, noRetryPolicy(t), store.Failure{ID: ids[1], LeaseToken: cs[ids[1]].LeaseToken, WorkerID: cs[ids[1]].WorkerID, Error: "e1", Reason: job.ReasonPermanent, Permanent: true})
	e.exec(t, `UPDATE jobs SET finished_at = now() - interval '1 hour' WHERE id = $1`, ids[0])

	dead, err := e.s.DeadList(e.ctx, 10)
	if err != nil {
		t.Fatalf("dead list: %v", err)
	}
	if len(dead) != 2 || dead[0].Job.ID != ids[1] || dead[1].Job.ID != ids[0] {
		t.Fatalf("dead list = %+v, want jobs %d then %d", dead, ids[1], ids[0])
	}
	if dead[0].Reason != job.ReasonPermanent || dead[1].Reason != job.ReasonMaxRetriesExceeded {
		t.Errorf("reasons = %q, %q", dead[0].Reason, dead[1].Reason)
	}
	if dead, _ := e.s.DeadList(e.ctx, 1); len(dead) != 1 {
		t.Errorf("limit 1 gave %d entries", len(dead))
	}
}

func TestJobList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 25
	ps := make([]store.JobInsertParams, n)
	for i := range ps {
		ps[i] = store.JobInsertParams{Name: []string{"even", "odd"}[i%2]}
	}
	ps[n-1].Queue = "mail" // the newest job, even
	ids := e.insert(t, ps...)
	// Complete the first four: ids[0] and ids[2] are even, ids[1] and ids[3] odd.
	cs := e.claim(t, nil, "w", "w", "w", "w")
	var done []store.Completion
	for id, c := range cs {
		done = append(done, store.Completion{ID: id, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID})
	}
	if _, err := e.s.JobCompleteMany(e.ctx, e.epoch, done); err != nil {
		t.Fatal(err)
	}

	// Paging through everything, newest first, 10 at a time.
	var seen []int64
	var before int64
	for page := 0; ; page++ {
		jobs, next, err := e.s.JobList(e.ctx, store.JobListParams{Before: before, Limit: 10})
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		if page < 2 && (len(jobs) != 10 || next != jobs[9].ID) {
			t.Fatalf("page %d: %d jobs, next %d, want 10 and the last id", page, len(jobs), next)
		}
		for _, j := range jobs {
			seen = append(seen, j.ID)
		}
		if next == 0 {
			if page != 2 || len(jobs) != 5 {
				t.Errorf("last page is page %d with %d jobs, want page 2 with 5", page, len(jobs))
			}
			break
		}
		before = next
	}
	want := slices.Clone(ids)
	slices.Reverse(want)
	if !slices.Equal(seen, want) {
		t.Errorf("paged ids = %v, want %v", seen, want)
	}

	// An exact fit ends with no cursor.
	if jobs, next, err := e.s.JobList(e.ctx, store.JobListParams{Limit: n}); err != nil || len(jobs) != n || next != 0 {
		t.Errorf("limit %d: %d jobs, next %d, err %v; want all and no cursor", n, len(jobs), next, err)
	}

	filters := []struct {
		p    store.JobListParams
		want []int64
	}{
		{store.JobListParams{Name: "odd", State: job.StateCompleted, Limit: 100}, []int64{ids[3], ids[1]}},
		{store.JobListParams{State: job.StateCompleted, Limit: 100}, []int64{ids[3], ids[2], ids[1], ids[0]}},
		{store.JobListParams{Name: "even", Before: ids[4], Limit: 100}, []int64{ids[2], ids[0]}},
		{store.JobListParams{Name: "none", Limit: 100}, nil},
		{store.JobListParams{State: job.StateFailed, Limit: 100}, nil},
		{store.JobListParams{Queue: "mail", Limit: 100}, []int64{ids[n-1]}},
		{store.JobListParams{Queue: "mail", Name: "odd", Limit: 100}, nil},
		{store.JobListParams{Queue: "default", Name: "even", Before: ids[4], Limit: 100}, []int64{ids[2], ids[0]}},
	}
	for _, f := range filters {
		jobs, next, err := e.s.JobList(e.ctx, f.p)
		if err != nil {
			t.Fatalf("list %+v: %v", f.p, err)
		}
		var got []int64
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		if !slices.Equal(got, f.want) || next != 0 {
			t.Errorf("list %+v = %v next %d, want %v", f.p, got, next, f.want)
		}
	}

	// A zero limit does not crash the caller.
	if _, _, err := e.s.JobList(e.ctx, store.JobListParams{}); err != nil {
		t.Errorf("zero limit: %v", err)
	}
}

func TestStatsGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	future := e.now(t).Add(time.Hour)
	ids := e.insert(t,
		store.JobInsertParams{Name: "leased", Priority: 9},
		store.JobInsertParams{Name: "retrying", Priority: 9, MaxRetries: 1},
		store.JobInsertParams{Name: "completed", Priority: 9},
		store.JobInsertParams{Name: "failed", Priority: 9},
		store.JobInsertParams{Name: "canceled"},
		store.JobInsertParams{Name: "pending"},
		store.JobInsertParams{Name: "pending-old"},
		store.JobInsertParams{Name: "pending-future", RunAt: &future},
	)
	cs := e.claim(t, nil, "w", "w", "w", "w")
	if len(cs) != 4 {
		t.Fatalf("claimed %v, want the four priority-9 jobs", keys(cs))
	}
	e.fail(t, fixedPolicy(time.Hour), store.Failure{ID: ids[1], LeaseToken: cs[ids[1]].LeaseToken, WorkerID: cs[ids[1]].WorkerID, Error: "x", Reason: job.ReasonError})
	e.fail(t, noRetryPolicy(t), store.Failure{ID: ids[3], LeaseToken: cs[ids[3]].LeaseToken, WorkerID: cs[ids[3]].WorkerID, Error: "x", Reason: job.ReasonPermanent, Permanent: true})
	if _, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{{ID: ids[2], LeaseToken: cs[ids[2]].LeaseToken, WorkerID: cs[ids[2]].WorkerID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.JobCancel(e.ctx, ids[4]); err != nil {
		t.Fatal(err)
	}
	e.exec(t, `UPDATE jobs SET next_run_at = now() - interval '30 seconds' WHERE id = $1`, ids[6])
	now := e.now(t)
	if err := e.s.WorkerSync(e.ctx, e.epoch, []store.WorkerRow{
		{ID: "a", State: "available", Concurrency: 1, LastHeartbeatAt: now},
		{ID: "b", State: "available", Concurrency: 1, LastHeartbeatAt: now},
		{ID: "c", State: "busy", Concurrency: 1, LastHeartbeatAt: now},
	}); err != nil {
		t.Fatal(err)
	}

	st, err := e.s.StatsGet(e.ctx)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	wantStates := map[job.State]int64{job.StatePending: 3, job.StateLeased: 1, job.StateRetrying: 1,
		job.StateCompleted: 1, job.StateFailed: 1, job.StateCanceled: 1}
	for s, n := range wantStates {
		if st.ByState[s] != n {
			t.Errorf("ByState[%s] = %d, want %d", s, st.ByState[s], n)
		}
	}
	if st.QueueDepth != 2 || st.DeadDepth != 1 {
		t.Errorf("queue depth %d, dead depth %d; want 2 and 1", st.QueueDepth, st.DeadDepth)
	}
	if st.OldestPendingAge < 30 || st.OldestPendingAge > 60 {
		t.Errorf("oldest pending age %.1fs, want about 30s", st.OldestPendingAge)
	}
	wantWorkers := map[string]int64{"available": 2, "busy": 1, "unavailable": 0, "draining": 0}
	for s, n := range wantWorkers {
		if got, ok := st.WorkersByState[s]; !ok || got != n {
			t.Errorf("WorkersByState[%s] = %d (present %v), want %d", s, got, ok, n)
		}
	}

	// An empty database reports zeros for every state.
	empty := newEnv(t)
	st, err = empty.s.StatsGet(empty.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.ByState) != len(job.States) || st.QueueDepth != 0 || st.OldestPendingAge != 0 || len(st.WorkersByState) != 4 {
		t.Errorf("empty stats = %+v", st)
	}
}

func TestJobCleanup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 9, "c", 0)
	set := func(id int64, state, age string) {
		e.exec(t, `UPDATE jobs SET status = $2, finished_at = now() - $3::interval WHERE id = $1`, id, state, age)
	}
	set(ids[0], "completed", "2 hours")    // deleted
	set(ids[1], "completed", "10 minutes") // kept: recent
	set(ids[2], "canceled", "2 hours")     // deleted
	set(ids[3], "canceled", "10 minutes")  // kept
	set(ids[4], "failed", "2 hours")       // kept: failed jobs live longer
	set(ids[5], "failed", "48 hours")      // deleted
	set(ids[6], "completed", "3 hours")    // deleted
	// ids[7] pending, created long ago: never deleted.
	e.exec(t, `UPDATE jobs SET created_at = now() - interval '30 days', next_run_at = now() + interval '1 day' WHERE id = $1`, ids[7])
	// ids[8] leased.
	e.exec(t, `UPDATE jobs SET status = 'leased', lease_token = 1, started_at = now() - interval '30 days' WHERE id = $1`, ids[8])

	// A batch of 1 makes it loop.
	n, err := e.s.JobCleanup(e.ctx, e.epoch, time.Hour, 24*time.Hour, 1)
	if err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if n != 4 {
		t.Errorf("deleted %d rows, want 4", n)
	}
	left := e.ids(t, `SELECT id FROM jobs ORDER BY id`)
	if want := []int64{ids[1], ids[3], ids[4], ids[7], ids[8]}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	if n, err := e.s.JobCleanup(e.ctx, e.epoch, time.Hour, 24*time.Hour, 100); err != nil || n != 0 {
		t.Errorf("second cleanup deleted %d, %v; want 0", n, err)
	}
	// A non-positive batch must not loop forever.
	set(ids[1], "completed", "2 hours")
	if n, err := e.s.JobCleanup(e.ctx, e.epoch, time.Hour, 24*time.Hour, 0); err != nil || n != 1 {
		t.Errorf("cleanup with batch 0 deleted %d, %v; want 1", n, err)
	}
}

func TestJobStateGetMany(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 2, "s", 0)
	e.claimOne(t, ids[0], "w")
	got, err := e.s.JobStateGetMany(e.ctx, []int64{ids[0], ids[1], 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]job.State{ids[0]: job.StateLeased, ids[1]: job.StatePending}
	if len(got) != 2 || got[ids[0]] != want[ids[0]] || got[ids[1]] != want[ids[1]] {
		t.Errorf("states = %v, want %v", got, want)
	}
	if got, err := e.s.JobStateGetMany(e.ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("no ids: %v %v", got, err)
	}
}

// A cancel that meets a row another transaction is changing (a claim, a
// failed attempt going to retrying) takes effect on the row's new state:
// a job that is still live is never answered "already final".
func TestJobCancelRacesStateChange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		leased bool   // the job is leased (claimed) before the race, else pending
		change string // what the other transaction does to job $1
		want   job.State
	}{
		{"claim", false, `UPDATE jobs SET status = 'leased', worker_id = 'w-race', lease_token = 77,
			lease_expires_at = now() + interval '1 minute', attempts = attempts + 1 WHERE id = $1`, job.StateLeased},
		{"retry", true, `UPDATE jobs SET status = 'retrying', lease_token = NULL, lease_expires_at = NULL,
			next_run_at = now() + interval '1 hour' WHERE id = $1`, job.StateCanceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			id := e.insertN(t, 1, "race", 3)[0]
			if tt.leased {
				e.claimOne(t, id, "w-first")
			}
			tx, err := e.db.Begin(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(e.ctx)
			if _, err := tx.Exec(e.ctx, tt.change, id); err != nil {
				t.Fatalf("change: %v", err)
			}

			type result struct {
				res store.CancelResult
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := e.s.JobCancel(e.ctx, id)
				done <- result{res, err}
			}()
			// The cancel waits for the row lock the change holds.
			waitLockWait(t, e, "UPDATE jobs")
			if err := tx.Commit(e.ctx); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("cancel during a %s: %v, want it to take effect", tt.name, r.err)
			}
			j := e.get(t, id)
			if r.res.State != tt.want || j.State != tt.want || !j.CancelRequest {
				t.Errorf("cancel during a %s = %+v, job %s cancel_requested %v; want %s with cancel_requested",
					tt.name, r.res, j.State, j.CancelRequest, tt.want)
			}
			if tt.want == job.StateLeased && (r.res.WorkerID != "w-race" || r.res.LeaseToken != 77) {
				t.Errorf("cancel names worker %q token %d, want the new lease's w-race 77", r.res.WorkerID, r.res.LeaseToken)
			}
		})
	}
}

// waitLockWait waits until a session of e's database runs a statement
// containing query and waits for a lock.
func waitLockWait(t *testing.T, e *env, query string) {
	t.Helper()
	testwait.For(t, 10*time.Second, fmt.Sprintf("a session running %q to wait for a lock", query), func() bool {
		var n int
		e.scalar(t, &n, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND position($1 in query) > 0`, query)
		return n > 0
	})
}

// A session PostgreSQL ends (pg_terminate_backend: 57P01 admin_shutdown,
// as at a shutdown) is job.ErrStoreUnavailable, never job.ErrRefused: a
// statement cut that way may have committed.
func TestStoreUnavailableOnTerminatedSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.insertN(t, 1, "x", 0)[0]
	// One connection, so the next statement runs on the terminated session.
	s, err := store.Open(e.ctx, e.url+"&pool_max_conns=1&application_name=victim", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var pid int
	if err := s.Ping(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.scalar(t, &pid, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'victim'`)
	var ok bool
	e.scalar(t, &ok, `SELECT pg_terminate_backend($1, 5000)`, pid)
	_, err = s.JobGet(e.ctx, id)
	if !errors.Is(err, job.ErrStoreUnavailable) || errors.Is(err, job.ErrRefused) {
		t.Errorf("get on a terminated session: %v, want job.ErrStoreUnavailable and not job.ErrRefused", err)
	}
	if _, err := s.JobGet(e.ctx, id); err != nil {
		t.Errorf("get after reconnecting: %v", err)
	}
}

// TestStatsGetUnhandled checks the count of waiting jobs whose name no live
// worker handles: live is available or busy, "*" handles every name, only
// pending and retrying jobs count (due or not), and the names are capped.
func TestStatsGetUnhandled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	future := e.now(t).Add(time.Hour)
	e.insertN(t, 3, "emial", 0)
	e.insert(t, store.JobInsertParams{Name: "emial", RunAt: &future}) // not due: still counted
	e.insertN(t, 2, "email", 0)                                       // handled by a busy worker
	e.insertN(t, 2, "resize", 0)                                      // handled only by a draining worker: not live
	e.insertN(t, 1, "archive", 0)                                     // handled only by an unavailable worker
	leased := e.insert(t, store.JobInsertParams{Name: "typo_leased", Priority: 9})
	e.claimOne(t, leased[0], "w")
	now := e.now(t)
	sync := func(rows ...store.WorkerRow) {
		t.Helper()
		if err := e.s.WorkerSync(e.ctx, e.epoch, rows); err != nil {
			t.Fatal(err)
		}
	}
	sync(
		store.WorkerRow{ID: "a", JobTypes: []string{"noop"}, State: "available", Concurrency: 1, LastHeartbeatAt: now},
		store.WorkerRow{ID: "b", JobTypes: []string{"email"}, State: "busy", Concurrency: 1, LastHeartbeatAt: now},
		store.WorkerRow{ID: "c", JobTypes: []string{"resize"}, State: "draining", Concurrency: 1, LastHeartbeatAt: now},
		store.WorkerRow{ID: "d", JobTypes: []string{"archive"}, State: "unavailable", Concurrency: 1, LastHeartbeatAt: now},
	)
	st, err := e.s.StatsGet(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"emial": 4, "resize": 2, "archive": 1}
	if !maps.Equal(st.Unhandled, want) || st.UnhandledOther != 0 {
		t.Errorf("unhandled = %v + %d other, want %v", st.Unhandled, st.UnhandledOther, want)
	}
	types, err := e.s.WorkerJobTypes(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"archive", "email", "noop", "resize"}; !slices.Equal(types, want) {
		t.Errorf("WorkerJobTypes = %v, want %v (every recorded worker's)", types, want)
	}

	// A live catch-all handles everything.
	sync(store.WorkerRow{ID: "any", JobTypes: []string{"*", "noop"}, State: "available", Concurrency: 1, LastHeartbeatAt: now})
	if st, err = e.s.StatsGet(e.ctx); err != nil || len(st.Unhandled) != 0 || st.UnhandledOther != 0 {
		t.Errorf("with a \"*\" worker: %v + %d other, %v; want none", st.Unhandled, st.UnhandledOther, err)
	}

	// No live worker at all: every waiting job is unhandled. Past
	// MaxUnhandledNames names, the smallest are summed in UnhandledOther.
	many := make([]store.JobInsertParams, store.MaxUnhandledNames+5)
	for i := range many {
		many[i] = store.JobInsertParams{Name: fmt.Sprintf("n%03d", i)}
	}
	e.insert(t, many...)
	sync()
	if st, err = e.s.StatsGet(e.ctx); err != nil {
		t.Fatal(err)
	}
	// By count, then name: emial 4, email 2, resize 2, then archive and
	// n000..n104 with 1 each; the first 100 are kept, n096..n104 summed.
	if len(st.Unhandled) != store.MaxUnhandledNames || st.Unhandled["emial"] != 4 || st.Unhandled["email"] != 2 ||
		st.Unhandled["archive"] != 1 || st.Unhandled["n095"] != 1 || st.Unhandled["n096"] != 0 || st.UnhandledOther != 9 {
		t.Errorf("%d names (want %d), emial %d, email %d, other %d: %v",
			len(st.Unhandled), store.MaxUnhandledNames, st.Unhandled["emial"], st.Unhandled["email"], st.UnhandledOther, st.Unhandled)
	}
}

// TestStatsGetStarved: a name is starved when its oldest due job has
// waited over StarvedAfter beside an available worker that handles it;
// not while only busy workers handle it, not for jobs with a limit_key or
// in a paused or capped queue, not for a job due only recently.
func TestStatsGetStarved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := e.now(t)
	old, older := now.Add(-2*store.StarvedAfter), now.Add(-3*store.StarvedAfter)
	recent := now.Add(-store.StarvedAfter / 3)
	e.insert(t,
		store.JobInsertParams{Name: "zz_shout", RunAt: &old},
		store.JobInsertParams{Name: "zz_shout", RunAt: &older},
		store.JobInsertParams{Name: "zz_shout", RunAt: &recent},
		store.JobInsertParams{Name: "fresh", RunAt: &recent},                          // waited too little
		store.JobInsertParams{Name: "busy_only", RunAt: &old},                         // its worker has no free slot
		store.JobInsertParams{Name: "fresh", RunAt: &old, ConcurrencyKey: "tenant-1"}, // waits for its limit
		store.JobInsertParams{Name: "fresh", RunAt: &old, Queue: "held"},              // its queue is paused
		store.JobInsertParams{Name: "fresh", RunAt: &old, Queue: "capped"},            // its queue is capped
		store.JobInsertParams{Name: "nobody", RunAt: &old},                            // unhandled, not starved
	)
	if _, err := e.s.QueueSetPaused(e.ctx, "held", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.QueueSetConcurrency(e.ctx, "capped", 1); err != nil {
		t.Fatal(err)
	}
	sync := func(rows ...store.WorkerRow) {
		t.Helper()
		if err := e.s.WorkerSync(e.ctx, e.epoch, rows); err != nil {
			t.Fatal(err)
		}
	}
	sync(
		store.WorkerRow{ID: "a", JobTypes: []string{"fresh", "zz_shout"}, State: "available", Concurrency: 1, LastHeartbeatAt: now},
		store.WorkerRow{ID: "b", JobTypes: []string{"busy_only"}, State: "busy", Concurrency: 1, LastHeartbeatAt: now},
	)
	st, err := e.s.StatsGet(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Starved) != 1 || st.Starved["zz_shout"] < 3*store.StarvedAfter.Seconds()-1 {
		t.Fatalf("starved = %v, want only zz_shout at about %v s (its oldest due job)", st.Starved, 3*store.StarvedAfter.Seconds())
	}

	// A "*" worker with a free slot handles every name; no available
	// worker: nothing is starved (the jobs are unhandled or wait for slots).
	sync(store.WorkerRow{ID: "any", JobTypes: []string{"*"}, State: "available", Concurrency: 1, LastHeartbeatAt: now})
	if st, err = e.s.StatsGet(e.ctx); err != nil || len(st.Starved) != 3 || st.Starved["nobody"] == 0 || st.Starved["busy_only"] == 0 {
		t.Errorf("with a free \"*\" worker: starved = %v, %v; want zz_shout, busy_only and nobody", st.Starved, err)
	}
	sync(store.WorkerRow{ID: "b", JobTypes: []string{"zz_shout"}, State: "busy", Concurrency: 1, LastHeartbeatAt: now})
	if st, err = e.s.StatsGet(e.ctx); err != nil || len(st.Starved) != 0 {
		t.Errorf("with busy workers only: starved = %v, %v; want none", st.Starved, err)
	}
}
