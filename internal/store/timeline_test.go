package store_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// TestJobTimelineRecords: what the hot path's own statements keep for the
// timeline, with no row added: a lease's extensions counted in the row,
// the failed attempt's entry with its token, start, extensions, backoff
// and next state, the completing lease's token in last_lease_token; and
// what job_events and the audit log add (a hand-back, stale results, an
// operator's action), read back in one call.
func TestJobTimelineRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.insert(t, store.JobInsertParams{Name: "flaky", MaxRetries: 3})[0]

	// Attempt 1 on wa: two extensions, then a failure with a 3 s backoff.
	c1 := e.claimOne(t, id, "wa")
	for _, lease := range []time.Duration{10 * time.Minute, time.Hour} {
		n, err := e.s.JobLeaseExtend(e.ctx, store.LeaseExtendParams{Epoch: e.epoch, IDs: []int64{id},
			Tokens: []int64{c1.LeaseToken}, Workers: []string{"wa"}, Lease: lease})
		if err != nil || n != 1 {
			t.Fatalf("extend: %d, %v", n, err)
		}
	}
	if j := e.get(t, id); j.LeaseExtensions != 2 || j.LeaseExpiresAt == nil {
		t.Fatalf("after two extensions: %d extensions, expires %v", j.LeaseExtensions, j.LeaseExpiresAt)
	}
	e.fail(t, fixedPolicy(3*time.Second), store.Failure{ID: id, LeaseToken: c1.LeaseToken, WorkerID: "wa", Error: "boom",
		Reason: job.ReasonError})
	j := e.get(t, id)
	if len(j.Errors) != 1 {
		t.Fatalf("errors = %+v", j.Errors)
	}
	a := j.Errors[0]
	if a.LeaseToken != c1.LeaseToken || a.StartedAt == nil || a.Extensions != 2 || a.NextState != job.StateRetrying ||
		a.RetryAt == nil || !a.RetryAt.Equal(j.NextRunAt) || a.WorkerID != "wa" || a.At.Before(*a.StartedAt) {
		t.Errorf("the failed attempt's entry = %+v (next_run_at %v)", a, j.NextRunAt)
	}
	if d := a.RetryAt.Sub(a.At); d != 3*time.Second {
		t.Errorf("backoff recorded as %v, want 3s", d)
	}
	if j.LastLeaseToken != c1.LeaseToken || j.LeaseExpiresAt != nil {
		t.Errorf("after the failure: last_lease_token %d (want %d), lease_expires_at %v", j.LastLeaseToken, c1.LeaseToken, j.LeaseExpiresAt)
	}

	// Attempt 2 on wb: a new lease starts with no extension, then
	// completes.
	e.makeDue(t, id)
	c2 := e.claimOne(t, id, "wb")
	if j := e.get(t, id); j.LeaseExtensions != 0 {
		t.Errorf("a new lease starts with %d extensions", j.LeaseExtensions)
	}
	if done, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{{ID: id, LeaseToken: c2.LeaseToken, WorkerID: "wb"}}); err != nil || len(done) != 1 {
		t.Fatalf("complete: %v, %v", done, err)
	}

	// Stale results: two for this job (the ended leases' tokens), one for
	// a job that does not exist; a flood of 250 for another job keeps
	// store.MaxStaleEventsPerJob of them.
	for i, rs := range [][]store.StaleResult{
		{{ID: id, LeaseToken: c1.LeaseToken, WorkerID: "wa", Attempt: 1, Outcome: "completed"}},
		{{ID: id, LeaseToken: c2.LeaseToken, WorkerID: "w\x00<b>" + strings.Repeat("x", 500), Attempt: 2, Outcome: "failed"},
			{ID: id + 1000, LeaseToken: 1, WorkerID: "wz", Attempt: 1, Outcome: "completed"}},
	} {
		n, err := e.s.JobEventInsertStale(e.ctx, e.epoch, rs)
		if err != nil || n != 1 {
			t.Fatalf("record stale results %d: %d, %v; want 1 (an unknown job is left out)", i, n, err)
		}
	}
	other := e.insert(t, store.JobInsertParams{Name: "victim"})[0]
	flood := make([]store.StaleResult, 250)
	for i := range flood {
		flood[i] = store.StaleResult{ID: other, LeaseToken: int64(i + 1), WorkerID: "hostile", Attempt: 1, Outcome: "completed"}
	}
	total := int64(0)
	for range 2 {
		n, err := e.s.JobEventInsertStale(e.ctx, e.epoch, flood)
		if err != nil {
			t.Fatal(err)
		}
		if n > store.MaxStaleEventsPerBatch {
			t.Errorf("one call recorded %d stale results, want at most %d", n, store.MaxStaleEventsPerBatch)
		}
		total += n
	}
	var kept int64
	e.scalar(t, &kept, `SELECT count(*) FROM job_events WHERE job_id = $1`, other)
	if kept != store.MaxStaleEventsPerJob || total != kept {
		t.Errorf("the flooded job keeps %d stale results (recorded %d), want %d", kept, total, store.MaxStaleEventsPerJob)
	}

	// An operator's action, from the audit log.
	if _, err := e.s.AuditInsert(e.ctx, store.AuditEntry{Actor: "key:ops", Action: store.AuditJobCancel, TargetType: store.AuditTargetJob,
		TargetID: strconv.FormatInt(id, 10), Details: []byte(`{"result":"failed","status":409}`)}); err != nil {
		t.Fatal(err)
	}

	got, evs, err := e.s.JobTimelineGet(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != job.StateCompleted || got.LastLeaseToken != c2.LeaseToken || got.WorkerID != "wb" {
		t.Errorf("job = %s, last_lease_token %d (want %d), worker %s", got.State, got.LastLeaseToken, c2.LeaseToken, got.WorkerID)
	}
	kinds := map[string]int{}
	for _, ev := range evs {
		kinds[ev.Kind]++
		if ev.Kind == job.EventStaleResult && ev.Attempt == 2 && (strings.Contains(ev.WorkerID, "\x00") || len(ev.WorkerID) > 200) {
			t.Errorf("a stale result's worker id is stored as %q", ev.WorkerID)
		}
		if ev.Kind == job.EventOperator && (ev.Action != store.AuditJobCancel || ev.Actor != "key:ops" || ev.Result != "failed") {
			t.Errorf("operator event = %+v", ev)
		}
	}
	if kinds[job.EventStaleResult] != 2 || kinds[job.EventOperator] != 1 || len(evs) != 3 {
		t.Errorf("events = %+v", evs)
	}
	tl := job.BuildTimeline(got, evs)
	var lines []string
	for _, en := range tl.Entries {
		s := en.Kind
		if en.LeaseToken != 0 {
			s += " " + map[int64]string{c1.LeaseToken: "t1", c2.LeaseToken: "t2"}[en.LeaseToken]
		}
		lines = append(lines, s)
	}
	want := "submitted leased t1 failed t1 backoff leased t2 completed t2 stale_result t1 stale_result t2 operator"
	if strings.Join(lines, " ") != want {
		t.Errorf("timeline: %s\nwant:     %s", strings.Join(lines, " "), want)
	}

	// Unknown job.
	if _, _, err := e.s.JobTimelineGet(e.ctx, id+1000); err == nil || !strings.Contains(err.Error(), job.ErrNotFound.Error()) {
		t.Errorf("timeline of an unknown job: %v, want not found", err)
	}

	// Retention deletes the events with their job.
	e.exec(t, `UPDATE jobs SET finished_at = now() - interval '2 days' WHERE id = $1`, id)
	if n, err := e.s.JobCleanup(e.ctx, e.epoch, time.Hour, time.Hour, 100); err != nil || n != 1 {
		t.Fatalf("cleanup: %d, %v", n, err)
	}
	e.scalar(t, &kept, `SELECT count(*) FROM job_events WHERE job_id = $1`, id)
	if kept != 0 {
		t.Errorf("%d events outlived their job", kept)
	}
}

// TestJobReleaseRecordsEvent: a hand-back, which leaves nothing in errors
// (the attempt does not count), leaves a released event with its lease.
func TestJobReleaseRecordsEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.insert(t, store.JobInsertParams{Name: "n"})[0]
	c := e.claimOne(t, id, "w1")
	out, err := e.s.JobReleaseMany(e.ctx, e.epoch, []store.Release{{ID: id, LeaseToken: c.LeaseToken, WorkerID: "w1"},
		{ID: id, LeaseToken: c.LeaseToken + 1, WorkerID: "w1"}}) // a stale one: nothing
	if err != nil || len(out) != 1 {
		t.Fatalf("release = %v, %v", out, err)
	}
	j, evs, err := e.s.JobTimelineGet(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 {
		t.Fatalf("events = %+v, want one released", evs)
	}
	ev := evs[0]
	if ev.Kind != job.EventReleased || ev.WorkerID != "w1" || ev.LeaseToken != c.LeaseToken || ev.Attempt != 1 ||
		ev.StartedAt == nil || ev.NextState != job.StatePending {
		t.Errorf("released event = %+v", ev)
	}
	if j.State != job.StatePending || j.Attempts != 0 || j.LastLeaseToken != c.LeaseToken {
		t.Errorf("after the release: %s, %d attempts, last_lease_token %d", j.State, j.Attempts, j.LastLeaseToken)
	}
}

// TestJobDeleteTakesEvents: DELETE /jobs/{id} and a bulk delete delete the
// jobs' job_events rows in the same statement (there is no foreign key),
// and leave those of the jobs they keep.
func TestJobDeleteTakesEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 4, "n", 0)
	for _, id := range ids {
		if n, err := e.s.JobEventInsertStale(e.ctx, e.epoch, []store.StaleResult{{ID: id, LeaseToken: 1, WorkerID: "w", Attempt: 1,
			Outcome: "completed"}}); err != nil || n != 1 {
			t.Fatalf("record: %d, %v", n, err)
		}
	}
	e.exec(t, `UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = ANY($1)`, ids[:2])
	e.exec(t, `UPDATE jobs SET name = 'other', status = 'failed', finished_at = now(), dead_reason = 'permanent' WHERE id = $1`, ids[2])
	if st, err := e.s.JobDelete(e.ctx, ids[0]); err != nil || st != job.StateCompleted {
		t.Fatalf("delete: %s, %v", st, err)
	}
	if n, err := e.s.JobBulkDelete(e.ctx, store.JobBulkParams{States: []job.State{job.StateFailed}, Name: "other"}); err != nil || n != 1 {
		t.Fatalf("bulk delete: %d, %v", n, err)
	}
	left := e.ids(t, `SELECT job_id FROM job_events ORDER BY job_id`)
	if len(left) != 2 || left[0] != ids[1] || left[1] != ids[3] {
		t.Errorf("events left for jobs %v, want those of %d and %d", left, ids[1], ids[3])
	}
}

// TestStaleEventsSkipTheAppliedResult: a result that arrives again after
// it was applied (the leader re-applying its own partly committed batch,
// or a result read again after a failed acknowledgement) ended its lease
// itself: it is no stale result and leaves no event. A result of the same
// lease after the lease was reclaimed, or one in another worker's name,
// is stale and recorded.
func TestStaleEventsSkipTheAppliedResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 4, "n", 0)
	record := func(r store.StaleResult) int64 {
		t.Helper()
		n, err := e.s.JobEventInsertStale(e.ctx, e.epoch, []store.StaleResult{r})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Completed by its result; the same result again, then forged by another worker.
	c := e.claimOne(t, ids[0], "w1")
	if done, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{{ID: ids[0], LeaseToken: c.LeaseToken,
		WorkerID: "w1", Result: json.RawMessage(`1`)}}); err != nil || len(done) != 1 {
		t.Fatalf("complete: %v %d", err, len(done))
	}
	if n := record(store.StaleResult{ID: ids[0], LeaseToken: c.LeaseToken, WorkerID: "w1", Attempt: 1, Outcome: "completed"}); n != 0 {
		t.Errorf("the applied completion again recorded %d stale events, want 0", n)
	}
	if n := record(store.StaleResult{ID: ids[0], LeaseToken: c.LeaseToken, WorkerID: "w2", Attempt: 1, Outcome: "completed"}); n != 1 {
		t.Errorf("another worker's result with the token recorded %d stale events, want 1", n)
	}

	// Failed by its result (retrying); the same failure again.
	c = e.claimOne(t, ids[1], "w1")
	e.fail(t, fixedPolicy(time.Hour), store.Failure{ID: ids[1], LeaseToken: c.LeaseToken, WorkerID: "w1", Error: "boom", Reason: job.ReasonError})
	if n := record(store.StaleResult{ID: ids[1], LeaseToken: c.LeaseToken, WorkerID: "w1", Attempt: 1, Outcome: "failed"}); n != 0 {
		t.Errorf("the applied failure again recorded %d stale events, want 0", n)
	}

	// Reclaimed as run out; its worker's late result is stale.
	c = e.claimOne(t, ids[2], "w1")
	if _, err := e.s.JobReclaimLeases(e.ctx, e.epoch, []store.Release{{ID: ids[2], LeaseToken: c.LeaseToken, WorkerID: "w1"}},
		fixedPolicy(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := record(store.StaleResult{ID: ids[2], LeaseToken: c.LeaseToken, WorkerID: "w1", Attempt: 1, Outcome: "completed"}); n != 1 {
		t.Errorf("a result after its lease was reclaimed recorded %d stale events, want 1", n)
	}

	// Handed back by its worker; the same release again.
	c = e.claimOne(t, ids[3], "w1")
	if _, err := e.s.JobReleaseMany(e.ctx, e.epoch, []store.Release{{ID: ids[3], LeaseToken: c.LeaseToken, WorkerID: "w1"}}); err != nil {
		t.Fatal(err)
	}
	if n := record(store.StaleResult{ID: ids[3], LeaseToken: c.LeaseToken, WorkerID: "w1", Attempt: 1, Outcome: "released"}); n != 0 {
		t.Errorf("the applied release again recorded %d stale events, want 0", n)
	}
}

// TestBulkRequeueOnTimeline: a job requeued by a bulk action (POST
// /jobs/bulk's batches, or a background operation's) has the requeue on
// its timeline, as a single requeue has through the audit log: an
// operator entry job.requeue with the actor and the result.
func TestBulkRequeueOnTimeline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 2, "bulkdead", 0)
	opIDs := e.insertN(t, 2, "opdead", 0)
	e.killAll(t, "bulkdead")
	e.killAll(t, "opdead")
	n, err := e.s.JobBulkRequeue(e.ctx, store.JobBulkParams{States: []job.State{job.StateFailed}, Name: "bulkdead", Actor: "api_key:ops"})
	if err != nil || n != 2 {
		t.Fatalf("bulk requeue: %d, %v", n, err)
	}
	op := newOp(t, e, "requeue", store.OperationFilter{States: []job.State{job.StateFailed}, Name: "opdead"}, "s1")
	if done, _ := runOp(t, e, op.ID, "s1", 1); done.Affected != 2 {
		t.Fatalf("the operation requeued %d, want 2", done.Affected)
	}
	for _, c := range []struct {
		id    int64
		actor string
	}{{ids[0], "api_key:ops"}, {ids[1], "api_key:ops"}, {opIDs[0], "apikey:1"}, {opIDs[1], "apikey:1"}} {
		_, evs, err := e.s.JobTimelineGet(e.ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		var got []job.Event
		for _, ev := range evs {
			if ev.Kind == job.EventOperator {
				got = append(got, ev)
			}
		}
		if len(got) != 1 || got[0].Action != "job.requeue" || got[0].Actor != c.actor || got[0].Result != "ok" || got[0].At.IsZero() {
			t.Errorf("job %d's operator events after a bulk requeue: %+v, want one job.requeue by %s", c.id, got, c.actor)
		}
	}
}
