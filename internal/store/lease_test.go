package store_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/jackc/pgx/v5"
)

func TestJobClaimOrderAndSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := e.now(t)
	at := func(d time.Duration) *time.Time { x := now.Add(d); return &x }
	ids := e.insert(t,
		store.JobInsertParams{Name: "a", Priority: 0, RunAt: at(-10 * time.Second)},
		store.JobInsertParams{Name: "b", Priority: 5, RunAt: at(-1 * time.Second)},
		store.JobInsertParams{Name: "c", Priority: 5, RunAt: at(-5 * time.Second)},
		store.JobInsertParams{Name: "d", Priority: 0, RunAt: at(-10 * time.Second)}, // ties with a: id decides
		store.JobInsertParams{Name: "e", Priority: -1, RunAt: at(-time.Hour)},
		store.JobInsertParams{Name: "f", Priority: 100, RunAt: at(time.Hour)}, // not due
	)
	a, b, c, d, ee, f := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]

	// Two slots: the two most urgent jobs, the first to Slots[0].
	got := e.claim(t, nil, "w1", "w2")
	if len(got) != 2 || got[c].WorkerID != "w1" || got[b].WorkerID != "w2" {
		t.Fatalf("first claim = %+v, want c→w1 b→w2", got)
	}
	// Five slots, three due jobs left.
	got = e.claim(t, nil, "x1", "x2", "x3", "x4", "x5")
	if len(got) != 3 || got[a].WorkerID != "x1" || got[d].WorkerID != "x2" || got[ee].WorkerID != "x3" {
		t.Fatalf("second claim = %+v, want a→x1 d→x2 e→x3", got)
	}
	if got := e.claim(t, nil, "y"); len(got) != 0 {
		t.Errorf("claimed %v; job %d is not due", keys(got), f)
	}
	if j := e.get(t, f); j.State != job.StatePending || j.Attempts != 0 {
		t.Errorf("future job is %s with %d attempts", j.State, j.Attempts)
	}
	if got, err := e.s.JobClaimBatch(e.ctx, store.JobClaimParams{Epoch: e.epoch, Lease: time.Minute}); err != nil || len(got) != 0 {
		t.Errorf("claim with no slots = %v, %v", got, err)
	}
}

func TestJobClaimFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.insert(t, store.JobInsertParams{Name: "n", Queue: "q", Payload: json.RawMessage(`{"k":"v"}`), MaxRetries: 4, TimeoutSeconds: 9})[0]
	before := e.now(t)
	cs, err := e.s.JobClaimBatch(e.ctx, store.JobClaimParams{Epoch: e.epoch, Slots: []string{"w"}, Lease: 90 * time.Second})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim = %+v, %v", cs, err)
	}
	c := cs[0]
	if c.ID != id || c.Name != "n" || c.Queue != "q" || c.Attempt != 1 || c.MaxRetries != 4 || c.TimeoutSeconds != 9 ||
		c.WorkerID != "w" || c.LeaseToken <= 0 || c.CreatedAt.IsZero() || !jsonEqual(t, c.Payload, []byte(`{"k":"v"}`)) {
		t.Errorf("claimed = %+v", c)
	}
	j := e.get(t, id)
	if j.State != job.StateLeased || j.Attempts != 1 || j.LeaseToken != c.LeaseToken || j.WorkerID != "w" || j.StartedAt == nil {
		t.Errorf("job after claim = %+v", j)
	}
	var expires time.Time
	e.scalar(t, &expires, `SELECT lease_expires_at FROM jobs WHERE id = $1`, id)
	within(t, "lease_expires_at", expires, before.Add(90*time.Second), 5*time.Second)
}

func TestJobClaimTypes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insert(t, store.JobInsertParams{Name: "a"}, store.JobInsertParams{Name: "b"}, store.JobInsertParams{Name: "c"}, store.JobInsertParams{Name: "b"})
	got := e.claim(t, []string{"b", "zzz"}, "w", "w", "w", "w")
	if len(got) != 2 || got[ids[1]].Name != "b" || got[ids[3]].Name != "b" {
		t.Errorf("claim of type b = %v, want jobs %d and %d", keys(got), ids[1], ids[3])
	}
	got = e.claim(t, nil, "w", "w", "w", "w")
	if len(got) != 2 || got[ids[0]].Name != "a" || got[ids[2]].Name != "c" {
		t.Errorf("claim of any type = %v, want jobs %d and %d", keys(got), ids[0], ids[2])
	}
}

func TestJobClaimConcurrentSkipLocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const jobs, claimers, batch = 200, 4, 7
	e.insertN(t, jobs, "bulk", 0)
	start := make(chan struct{})
	got := make([][]store.Claimed, claimers)
	errs := make([]error, claimers)
	var wg sync.WaitGroup
	for i := range claimers {
		slots := slices.Repeat([]string{fmt.Sprintf("w%d", i)}, batch)
		wg.Go(func() {
			<-start
			for {
				cs, err := e.s.JobClaimBatch(e.ctx, store.JobClaimParams{Epoch: e.epoch, Slots: slots, Lease: time.Minute})
				if err != nil {
					errs[i] = err
					return
				}
				if len(cs) == 0 {
					return // empty, or every due row is locked by a claimer that will take it
				}
				got[i] = append(got[i], cs...)
			}
		})
	}
	close(start)
	wg.Wait()
	owner := map[int64]int{}
	tokens := map[int64]bool{}
	for i := range claimers {
		if errs[i] != nil {
			t.Fatalf("claimer %d: %v", i, errs[i])
		}
		for _, c := range got[i] {
			if prev, dup := owner[c.ID]; dup {
				t.Errorf("job %d leased by claimer %d and claimer %d", c.ID, prev, i)
			}
			owner[c.ID] = i
			if tokens[c.LeaseToken] {
				t.Errorf("lease token %d given twice", c.LeaseToken)
			}
			tokens[c.LeaseToken] = true
			if want := fmt.Sprintf("w%d", i); c.WorkerID != want || c.Attempt != 1 {
				t.Errorf("job %d: worker %s attempt %d, want %s 1", c.ID, c.WorkerID, c.Attempt, want)
			}
		}
	}
	if len(owner) != jobs {
		t.Errorf("claimers leased %d jobs together, want %d", len(owner), jobs)
	}
	var leased, distinct int
	e.scalar(t, &leased, `SELECT count(*) FROM jobs WHERE status = 'leased' AND attempts = 1`)
	e.scalar(t, &distinct, `SELECT count(DISTINCT lease_token) FROM jobs`)
	if leased != jobs || distinct != jobs {
		t.Errorf("%d leased with one attempt and %d distinct tokens, want %d", leased, distinct, jobs)
	}
}

func TestJobClaimFreshTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.insertN(t, 1, "t", 5)[0]
	seen := map[int64]bool{}
	var last int64
	for attempt := 1; attempt <= 3; attempt++ {
		c := e.claimOne(t, id, "w")
		if c.Attempt != attempt {
			t.Errorf("attempt %d claimed as attempt %d", attempt, c.Attempt)
		}
		// Random 63-bit tokens: never reused, never zero, and not the
		// previous one plus a little (a worker must not be able to guess
		// another lease's token from its own).
		if seen[c.LeaseToken] || c.LeaseToken <= 0 || (last != 0 && c.LeaseToken-last < 1<<20 && last-c.LeaseToken < 1<<20) {
			t.Errorf("attempt %d got token %d after %d: seen before, not positive or close to it", attempt, c.LeaseToken, last)
		}
		seen[c.LeaseToken], last = true, c.LeaseToken
		out := e.fail(t, fixedPolicy(0), store.Failure{ID: id, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID, Error: "again", Reason: job.ReasonError})
		if out[id].State != job.StateRetrying {
			t.Fatalf("attempt %d: %+v, want retrying", attempt, out)
		}
	}
}

func TestJobCompleteFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.insertN(t, 1, "f", 3)[0]
	old := e.claimOne(t, id, "w1")
	if rel, err := e.s.JobReleaseMany(e.ctx, e.epoch, []store.Release{{ID: id, LeaseToken: old.LeaseToken, WorkerID: old.WorkerID}}); err != nil || len(rel) != 1 {
		t.Fatalf("release = %v, %v", rel, err)
	}
	cur := e.claimOne(t, id, "w2")

	// The current token from another worker is refused too: a worker
	// cannot report on a lease that is not its own.
	for _, tc := range []struct {
		name   string
		token  int64
		worker string
	}{
		{"old token", old.LeaseToken, "w2"}, {"wrong token", cur.LeaseToken + 1000, "w2"}, {"zero token", 0, "w2"},
		{"another worker", cur.LeaseToken, "w1"}, {"no worker", cur.LeaseToken, ""},
	} {
		name, token := tc.name, tc.token
		fin, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{{ID: id, LeaseToken: token, WorkerID: tc.worker, Result: json.RawMessage(`"stale"`)}})
		if err != nil || len(fin) != 0 {
			t.Errorf("complete with %s = %+v, %v; want nothing", name, fin, err)
		}
		out := e.fail(t, fixedPolicy(0), store.Failure{ID: id, LeaseToken: token, WorkerID: tc.worker, Error: "stale", Reason: job.ReasonError})
		if len(out) != 0 {
			t.Errorf("fail with %s = %+v; want nothing", name, out)
		}
		if rel, err := e.s.JobReleaseMany(e.ctx, e.epoch, []store.Release{{ID: id, LeaseToken: token, WorkerID: tc.worker}}); err != nil || len(rel) != 0 {
			t.Errorf("release with %s = %v, %v; want nothing", name, rel, err)
		}
		ext := store.LeaseExtendParams{Epoch: e.epoch, IDs: []int64{id}, Tokens: []int64{token}, Workers: []string{tc.worker}, Lease: time.Hour}
		if n, err := e.s.JobLeaseExtend(e.ctx, ext); err != nil || n != 0 {
			t.Errorf("extend with %s = %d, %v; want nothing", name, n, err)
		}
		if j := e.get(t, id); j.State != job.StateLeased || j.LeaseToken != cur.LeaseToken || j.Result != nil || len(j.Errors) != 0 || j.WorkerID != "w2" {
			t.Errorf("after %s: job = %+v, want it untouched", name, j)
		}
	}

	// A stale report ahead of the current one in the same batch does not
	// hide the current one.
	out := e.fail(t, fixedPolicy(time.Hour),
		store.Failure{ID: id, LeaseToken: old.LeaseToken, WorkerID: old.WorkerID, Error: "stale", Reason: job.ReasonError},
		store.Failure{ID: id, LeaseToken: cur.LeaseToken, WorkerID: cur.WorkerID, Error: "current", Reason: job.ReasonError})
	if o, ok := out[id]; !ok || o.LeaseToken != cur.LeaseToken || o.Error != "current" {
		t.Fatalf("fail batch with a stale and a current report = %+v", out)
	}
	e.makeDue(t, id)
	cur = e.claimOne(t, id, "w2")
	fin, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{
		{ID: id, LeaseToken: old.LeaseToken, WorkerID: old.WorkerID, Result: json.RawMessage(`"stale"`)},
		{ID: id, LeaseToken: cur.LeaseToken, WorkerID: cur.WorkerID, Result: json.RawMessage(`{"ok": true}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(fin) != 1 || fin[0].ID != id || fin[0].Name != "f" || fin[0].WorkerID != "w2" || fin[0].StartedAt.Before(fin[0].CreatedAt) {
		t.Errorf("complete = %+v", fin)
	}
	j := e.get(t, id)
	if j.State != job.StateCompleted || !jsonEqual(t, j.Result, []byte(`{"ok":true}`)) || j.FinishedAt == nil || j.LeaseToken != 0 {
		t.Errorf("completed job = %+v", j)
	}

	// The same result again (a redelivered stream entry) changes nothing.
	fin, err = e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{{ID: id, LeaseToken: cur.LeaseToken, WorkerID: cur.WorkerID, Result: json.RawMessage(`2`)}})
	if err != nil || len(fin) != 0 {
		t.Errorf("second completion = %+v, %v; want nothing", fin, err)
	}
	if out := e.fail(t, fixedPolicy(0), store.Failure{ID: id, LeaseToken: cur.LeaseToken, WorkerID: cur.WorkerID, Error: "late", Reason: job.ReasonError}); len(out) != 0 {
		t.Errorf("failure after completion = %+v; want nothing", out)
	}
	if j := e.get(t, id); j.State != job.StateCompleted || !jsonEqual(t, j.Result, []byte(`{"ok":true}`)) {
		t.Errorf("after duplicates: %s %s", j.State, j.Result)
	}
}

func TestJobCompleteManyMixedBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 3, "m", 0)
	cs := e.claim(t, nil, "w", "w", "w")
	fin, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{
		{ID: ids[0], LeaseToken: cs[ids[0]].LeaseToken, WorkerID: cs[ids[0]].WorkerID},                                 // no result
		{ID: ids[1], LeaseToken: cs[ids[1]].LeaseToken + 1, WorkerID: cs[ids[1]].WorkerID},                             // stale
		{ID: ids[2], LeaseToken: cs[ids[2]].LeaseToken, WorkerID: cs[ids[2]].WorkerID, Result: json.RawMessage(`[1]`)}, // result
		{ID: ids[2], LeaseToken: cs[ids[2]].LeaseToken, WorkerID: cs[ids[2]].WorkerID, Result: json.RawMessage(`[1]`)}, // duplicate in the batch
		{ID: 1_000_000, LeaseToken: cs[ids[0]].LeaseToken, WorkerID: cs[ids[0]].WorkerID},                              // unknown job
	})
	if err != nil {
		t.Fatal(err)
	}
	var done []int64
	for _, f := range fin {
		done = append(done, f.ID)
	}
	slices.Sort(done)
	if !slices.Equal(done, []int64{ids[0], ids[2]}) {
		t.Errorf("completed %v, want %d and %d", done, ids[0], ids[2])
	}
	if j := e.get(t, ids[0]); j.State != job.StateCompleted || j.Result != nil {
		t.Errorf("job without result: %s %s", j.State, j.Result)
	}
	if j := e.get(t, ids[1]); j.State != job.StateLeased {
		t.Errorf("stale completion moved job to %s", j.State)
	}
	if j := e.get(t, ids[2]); j.State != job.StateCompleted || string(j.Result) != "[1]" {
		t.Errorf("job with result: %s %s", j.State, j.Result)
	}
}

func TestJobFailRetryThenDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const maxRetries = 2
	id := e.insertN(t, 1, "flaky", maxRetries)[0]
	var asked []int
	policy := func(attempt int) time.Duration {
		asked = append(asked, attempt)
		return time.Duration(attempt) * 10 * time.Minute
	}
	for attempt := 1; attempt <= maxRetries+1; attempt++ {
		c := e.claimOne(t, id, fmt.Sprintf("w%d", attempt))
		if c.Attempt != attempt {
			t.Fatalf("claim %d has attempt %d", attempt, c.Attempt)
		}
		before := e.now(t)
		out := e.fail(t, policy, store.Failure{ID: id, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID, Error: fmt.Sprintf("boom %d", attempt), Reason: job.ReasonError})
		o, ok := out[id]
		if !ok {
			t.Fatalf("attempt %d: failure not applied", attempt)
		}
		if o.LeaseToken != c.LeaseToken || o.Attempts != attempt || o.MaxRetries != maxRetries || o.Name != "flaky" || o.WorkerID != c.WorkerID {
			t.Errorf("attempt %d: outcome %+v", attempt, o)
		}
		j := e.get(t, id)
		if attempt <= maxRetries {
			wantDelay := time.Duration(attempt) * 10 * time.Minute
			if o.State != job.StateRetrying || o.Delay != wantDelay || o.Reason != job.ReasonError {
				t.Errorf("attempt %d: outcome %s delay %v reason %s, want retrying after %v", attempt, o.State, o.Delay, o.Reason, wantDelay)
			}
			if j.State != job.StateRetrying || j.LeaseToken != 0 || j.FinishedAt != nil || j.LastError != fmt.Sprintf("boom %d", attempt) {
				t.Errorf("attempt %d: job %+v", attempt, j)
			}
			within(t, "next_run_at", j.NextRunAt, before.Add(wantDelay), 5*time.Second)
			if got := e.claim(t, nil, "early"); len(got) != 0 {
				t.Fatalf("attempt %d: job claimed before its backoff ran out", attempt)
			}
			e.makeDue(t, id)
			continue
		}
		if o.State != job.StateFailed || o.Reason != job.ReasonMaxRetriesExceeded || o.Delay != 0 {
			t.Errorf("last attempt: outcome %s reason %s delay %v, want failed max_retries_exceeded", o.State, o.Reason, o.Delay)
		}
		if j.State != job.StateFailed || j.FinishedAt == nil || j.Attempts != maxRetries+1 {
			t.Errorf("last attempt: job %s finished %v attempts %d", j.State, j.FinishedAt, j.Attempts)
		}
		var reason string
		e.scalar(t, &reason, `SELECT dead_reason FROM jobs WHERE id = $1`, id)
		if reason != job.ReasonMaxRetriesExceeded {
			t.Errorf("dead_reason = %q", reason)
		}
		if len(j.Errors) != maxRetries+1 {
			t.Fatalf("errors = %+v, want %d entries", j.Errors, maxRetries+1)
		}
		for i, ae := range j.Errors {
			if ae.Attempt != i+1 || ae.Error != fmt.Sprintf("boom %d", i+1) || ae.Reason != job.ReasonError ||
				ae.WorkerID != fmt.Sprintf("w%d", i+1) || ae.At.IsZero() {
				t.Errorf("errors[%d] = %+v", i, ae)
			}
		}
		var errs []job.AttemptError
		if err := json.Unmarshal(o.Errors, &errs); err != nil || len(errs) != maxRetries+1 {
			t.Errorf("outcome errors %s: %v", o.Errors, err)
		}
	}
	if !slices.Equal(asked, []int{1, 2}) {
		t.Errorf("policy asked for attempts %v, want [1 2]", asked)
	}
	if got := e.claim(t, nil, "w"); len(got) != 0 {
		t.Errorf("dead job claimed again")
	}
}

func TestJobFailPermanentCanceledTruncated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 4, "p", 5)
	perm, canceled, long, dup := ids[0], ids[1], ids[2], ids[3]
	cs := e.claim(t, nil, "w", "w", "w", "w")
	if res, err := e.s.JobCancel(e.ctx, canceled); err != nil || res.State != job.StateLeased {
		t.Fatalf("cancel = %+v, %v", res, err)
	}
	out := e.fail(t, noRetryPolicy(t),
		store.Failure{ID: perm, LeaseToken: cs[perm].LeaseToken, WorkerID: cs[perm].WorkerID, Error: "invalid", Reason: job.ReasonPermanent, Permanent: true},
		store.Failure{ID: canceled, LeaseToken: cs[canceled].LeaseToken, WorkerID: cs[canceled].WorkerID, Error: "stopped", Reason: job.ReasonCanceled},
		store.Failure{ID: long, LeaseToken: cs[long].LeaseToken, WorkerID: cs[long].WorkerID, Error: strings.Repeat("é", 3000), Reason: job.ReasonTimeout, Immediate: true},
		store.Failure{ID: dup, LeaseToken: cs[dup].LeaseToken, WorkerID: cs[dup].WorkerID, Error: "one", Reason: job.ReasonError, Immediate: true},
		store.Failure{ID: dup, LeaseToken: cs[dup].LeaseToken, WorkerID: cs[dup].WorkerID, Error: "two", Reason: job.ReasonError, Immediate: true},
	)
	if o := out[perm]; o.State != job.StateFailed || o.Reason != job.ReasonPermanent || o.Attempts != 1 {
		t.Errorf("permanent failure: %+v", o)
	}
	if j := e.get(t, perm); j.State != job.StateFailed || j.FinishedAt == nil {
		t.Errorf("permanent failure left job %s", j.State)
	}
	if o := out[canceled]; o.State != job.StateCanceled {
		t.Errorf("failure of a canceled job: %+v", o)
	}
	if j := e.get(t, canceled); j.State != job.StateCanceled || j.FinishedAt == nil || len(j.Errors) != 1 {
		t.Errorf("canceled job: %s finished %v errors %d", j.State, j.FinishedAt, len(j.Errors))
	}
	j := e.get(t, long)
	if j.State != job.StateRetrying || len(j.LastError) > 2048 || len(j.LastError) < 2000 {
		t.Errorf("long error: state %s, last_error %d bytes", j.State, len(j.LastError))
	}
	if j := e.get(t, dup); j.State != job.StateRetrying || len(j.Errors) != 1 || j.Errors[0].Error != "one" {
		t.Errorf("duplicate failure: %s errors %+v, want one entry", j.State, j.Errors)
	}
	// Immediate retries are due at once.
	got := e.claim(t, nil, "w", "w", "w")
	if len(got) != 2 || got[long].Attempt != 2 || got[dup].Attempt != 2 {
		t.Errorf("claimed %v after immediate retries, want %d and %d at attempt 2", keys(got), long, dup)
	}
}

func TestJobReleaseMany(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 3, "r", 5)
	cs := e.claim(t, nil, "w", "w", "w")
	// ids[1] is on its second attempt.
	e.fail(t, fixedPolicy(0), store.Failure{ID: ids[1], LeaseToken: cs[ids[1]].LeaseToken, WorkerID: cs[ids[1]].WorkerID, Error: "x", Reason: job.ReasonError})
	c1 := e.claimOne(t, ids[1], "w")
	if _, err := e.s.JobCancel(e.ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.JobReleaseMany(e.ctx, e.epoch, []store.Release{
		{ID: ids[0], LeaseToken: cs[ids[0]].LeaseToken, WorkerID: cs[ids[0]].WorkerID},
		{ID: ids[1], LeaseToken: c1.LeaseToken, WorkerID: c1.WorkerID},
		{ID: ids[1], LeaseToken: cs[ids[1]].LeaseToken, WorkerID: cs[ids[1]].WorkerID}, // stale
		{ID: ids[2], LeaseToken: cs[ids[2]].LeaseToken, WorkerID: cs[ids[2]].WorkerID},
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Errorf("released %v, want %v", got, ids)
	}
	for i, want := range []struct {
		state    job.State
		attempts int
	}{{job.StatePending, 0}, {job.StatePending, 1}, {job.StateCanceled, 0}} {
		j := e.get(t, ids[i])
		if j.State != want.state || j.Attempts != want.attempts || j.LeaseToken != 0 {
			t.Errorf("job %d: %s attempts %d token %d, want %s attempts %d", i, j.State, j.Attempts, j.LeaseToken, want.state, want.attempts)
		}
		if (j.FinishedAt != nil) != (want.state == job.StateCanceled) {
			t.Errorf("job %d: finished_at %v", i, j.FinishedAt)
		}
	}
	again := e.claim(t, nil, "w", "w", "w")
	if len(again) != 2 || again[ids[0]].Attempt != 1 || again[ids[1]].Attempt != 2 {
		t.Errorf("claim after release = %+v, want jobs 0 and 1 at attempts 1 and 2", again)
	}
	if got, err := e.s.JobReleaseMany(e.ctx, e.epoch, []store.Release{{ID: ids[0], LeaseToken: cs[ids[0]].LeaseToken, WorkerID: cs[ids[0]].WorkerID}}); err != nil || len(got) != 0 {
		t.Errorf("release with the old token = %v, %v", got, err)
	}
}

// TestJobReclaimLeasesOnlyRecorded: a reclaim acts on the (job, token,
// worker) triples the leader recorded, never on every lease of a worker id:
// a worker that came back under the same id keeps the lease it got since.
func TestJobReclaimLeasesOnlyRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 2, "r", 3)
	first := e.claimOne(t, ids[0], "w")
	second := e.claimOne(t, ids[1], "w") // after it rejoined
	out, err := e.s.JobReclaimLeases(e.ctx, e.epoch, []store.Release{{ID: first.ID, LeaseToken: first.LeaseToken, WorkerID: "w"}}, noRetryPolicy(t))
	if err != nil || len(out) != 1 || out[0].ID != ids[0] {
		t.Fatalf("reclaim = %+v, %v; want job %d only", out, err, ids[0])
	}
	if j := e.get(t, ids[1]); j.State != job.StateLeased || j.LeaseToken != second.LeaseToken {
		t.Errorf("the worker's newer lease was reclaimed: %s", j.State)
	}
}

func TestJobReclaimWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insert(t,
		store.JobInsertParams{Name: "a", MaxRetries: 3},
		store.JobInsertParams{Name: "b", MaxRetries: 0},
		store.JobInsertParams{Name: "c", MaxRetries: 3},
	)
	cs := e.claim(t, nil, "dead", "dead", "alive")
	var recorded []store.Release
	for _, c := range cs {
		recorded = append(recorded, store.Release{ID: c.ID, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID})
	}
	// Every lease named as the dead worker's, the alive worker's by
	// mistake: the worker mismatch keeps that one.
	out, err := e.s.JobReclaimLeases(e.ctx, e.epoch, deadOnly(recorded), noRetryPolicy(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 {
		t.Fatalf("reclaimed %+v, want 2", out)
	}
	for _, o := range out {
		if o.LeaseToken != cs[o.ID].LeaseToken || o.WorkerID != "dead" || o.Delay != 0 {
			t.Errorf("outcome %+v", o)
		}
	}
	j := e.get(t, ids[0])
	if j.State != job.StateRetrying || len(j.Errors) != 1 || j.Errors[0].Reason != job.ReasonWorkerFailure || j.Errors[0].WorkerID != "dead" {
		t.Errorf("reclaimed job: %s %+v", j.State, j.Errors)
	}
	var reason string
	e.scalar(t, &reason, `SELECT dead_reason FROM jobs WHERE id = $1`, ids[1])
	if j := e.get(t, ids[1]); j.State != job.StateFailed || reason != job.ReasonMaxRetriesExceeded {
		t.Errorf("job without retries: %s %q", j.State, reason)
	}
	if j := e.get(t, ids[2]); j.State != job.StateLeased || j.LeaseToken != cs[ids[2]].LeaseToken {
		t.Errorf("live worker's job is %s", j.State)
	}
	// The retry is due at once.
	if c := e.claimOne(t, ids[0], "new"); c.Attempt != 2 {
		t.Errorf("retry claimed as attempt %d", c.Attempt)
	}
	if out, err := e.s.JobReclaimLeases(e.ctx, e.epoch, deadOnly(recorded), noRetryPolicy(t)); err != nil || len(out) != 0 {
		t.Errorf("second reclaim = %+v, %v", out, err)
	}
}

// deadOnly names every lease as the worker "dead"'s.
func deadOnly(rs []store.Release) []store.Release {
	out := make([]store.Release, len(rs))
	for i, r := range rs {
		r.WorkerID = "dead"
		out[i] = r
	}
	return out
}

func TestJobReclaimExpired(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 3, "x", 3)
	cs := e.claim(t, nil, "w", "w", "w")
	if n := e.exec(t, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = ANY($1)`, ids[:2]); n != 2 {
		t.Fatalf("expired %d leases", n)
	}
	// A worker the leader spares (alive, not heard since a stall) keeps
	// its expired leases for now.
	if out, err := e.s.JobReclaimExpired(e.ctx, e.epoch, []string{"w"}, fixedPolicy(time.Minute)); err != nil || len(out) != 0 {
		t.Fatalf("reclaim sparing w = %+v, %v; want nothing", out, err)
	}
	before := e.now(t)
	out, err := e.s.JobReclaimExpired(e.ctx, e.epoch, []string{"another"}, fixedPolicy(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64]store.FailOutcome{}
	for _, o := range out {
		got[o.ID] = o
	}
	if len(got) != 2 {
		t.Fatalf("reclaimed %v, want %d and %d", keys(got), ids[0], ids[1])
	}
	for _, id := range ids[:2] {
		o := got[id]
		if o.State != job.StateRetrying || o.Reason != job.ReasonLeaseTimeout || o.Delay != time.Minute || o.LeaseToken != cs[id].LeaseToken {
			t.Errorf("outcome %+v", o)
		}
		j := e.get(t, id)
		if j.State != job.StateRetrying || len(j.Errors) != 1 || j.Errors[0].Reason != job.ReasonLeaseTimeout {
			t.Errorf("job %d: %s %+v", id, j.State, j.Errors)
		}
		within(t, "next_run_at", j.NextRunAt, before.Add(time.Minute), 5*time.Second)
	}
	if j := e.get(t, ids[2]); j.State != job.StateLeased {
		t.Errorf("unexpired lease is %s", j.State)
	}
	if out, err := e.s.JobReclaimExpired(e.ctx, e.epoch, nil, fixedPolicy(time.Minute)); err != nil || len(out) != 0 {
		t.Errorf("second reclaim = %+v, %v", out, err)
	}
}

func TestJobLeaseExtend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insert(t,
		store.JobInsertParams{Name: "stale-token"},
		store.JobInsertParams{Name: "extend"},
		store.JobInsertParams{Name: "over-timeout", TimeoutSeconds: 60},
		store.JobInsertParams{Name: "within-timeout", TimeoutSeconds: 60},
	)
	cs := e.claim(t, nil, "w", "w", "w", "w")
	params := func(lease time.Duration) store.LeaseExtendParams {
		p := store.LeaseExtendParams{Epoch: e.epoch, Lease: lease}
		for _, id := range ids {
			tok := cs[id].LeaseToken
			if id == ids[0] {
				tok += 1000
			}
			p.IDs, p.Tokens, p.Workers = append(p.IDs, id), append(p.Tokens, tok), append(p.Workers, "w")
		}
		return p
	}
	// Leases are one minute long and fresh: none is within half of a
	// minute of running out.
	if n, err := e.s.JobLeaseExtend(e.ctx, params(time.Minute)); err != nil || n != 0 {
		t.Errorf("extend fresh leases moved %d (%v), want 0", n, err)
	}
	e.exec(t, `UPDATE jobs SET lease_expires_at = now() + interval '10 seconds'`)
	e.exec(t, `UPDATE jobs SET started_at = now() - interval '2 minutes' WHERE id = $1`, ids[2])
	before := e.now(t)
	n, err := e.s.JobLeaseExtend(e.ctx, params(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("extended %d leases, want 2 (the valid ones within their timeout)", n)
	}
	expiry := func(id int64) time.Time {
		var x time.Time
		e.scalar(t, &x, `SELECT lease_expires_at FROM jobs WHERE id = $1`, id)
		return x
	}
	within(t, "stale token's lease", expiry(ids[0]), before.Add(10*time.Second), 5*time.Second)
	within(t, "extended lease", expiry(ids[1]), before.Add(time.Minute), 5*time.Second)
	within(t, "lease past timeout", expiry(ids[2]), before.Add(10*time.Second), 5*time.Second)
	within(t, "lease within timeout", expiry(ids[3]), before.Add(time.Minute), 5*time.Second)
	if n, err := e.s.JobLeaseExtend(e.ctx, store.LeaseExtendParams{Epoch: e.epoch, Lease: time.Minute}); err != nil || n != 0 {
		t.Errorf("extend nothing = %d, %v", n, err)
	}
}

// TestJobLeaseExtendCountsFromHandlerStart: a job's time limit counts from
// its handler's start as its worker reports it, not from its lease's: a
// job whose handler has not started (prefetched, waiting for a slot) is
// extended however long ago it was leased, one that started recently is
// extended, one past its time limit plus a lease is not, and one whose
// worker says nothing (an older worker) counts from its lease's start.
func TestJobLeaseExtendCountsFromHandlerStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insert(t,
		store.JobInsertParams{Name: "waiting", TimeoutSeconds: 60},
		store.JobInsertParams{Name: "started-lately", TimeoutSeconds: 60},
		store.JobInsertParams{Name: "started-long-ago", TimeoutSeconds: 60},
		store.JobInsertParams{Name: "not-said", TimeoutSeconds: 60},
	)
	cs := e.claim(t, nil, "w", "w", "w", "w")
	e.exec(t, `UPDATE jobs SET lease_expires_at = now() + interval '10 seconds', started_at = now() - interval '3 minutes'`)
	p := store.LeaseExtendParams{Epoch: e.epoch, Lease: time.Minute,
		Waiting: []bool{true, false, false, false}, RunMillis: []int64{-1, 30_000, 121_000, -1}}
	for _, id := range ids {
		p.IDs, p.Tokens, p.Workers = append(p.IDs, id), append(p.Tokens, cs[id].LeaseToken), append(p.Workers, "w")
	}
	before := e.now(t)
	n, err := e.s.JobLeaseExtend(e.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("extended %d leases, want 2 (the waiting one and the one started lately)", n)
	}
	for i, want := range []time.Duration{time.Minute, time.Minute, 10 * time.Second, 10 * time.Second} {
		var x time.Time
		e.scalar(t, &x, `SELECT lease_expires_at FROM jobs WHERE id = $1`, ids[i])
		within(t, "lease of the "+[]string{"waiting", "started-lately", "started-long-ago", "not-said"}[i]+" job", x, before.Add(want), 5*time.Second)
	}
	p.RunMillis = p.RunMillis[:1]
	if _, err := e.s.JobLeaseExtend(e.ctx, p); err == nil {
		t.Error("extend with fewer run times than ids: no error")
	}
}

func TestJobLeasesList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insertN(t, 3, "l", 0)
	cs := e.claim(t, nil, "a", "b")
	ls, err := e.s.JobLeasesList(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 {
		t.Fatalf("leases = %+v, want 2", ls)
	}
	for _, l := range ls {
		if c := cs[l.ID]; c.LeaseToken != l.LeaseToken || c.WorkerID != l.WorkerID {
			t.Errorf("lease %+v, claimed %+v", l, c)
		}
	}
}

// TestJobResultsWithUnstorableText: what a worker reports must never make
// a whole batch fail, or the coordinator would read the same poisoned batch
// forever. PostgreSQL text and jsonb refuse NUL characters and invalid
// UTF-8, and a byte-wise cut of a long message can split a character.
func TestJobResultsWithUnstorableText(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 5, "u", 3)
	cs := e.claim(t, nil, "w", "w", "w", "w", "w")
	out, err := e.s.JobFailMany(e.ctx, e.epoch, []store.Failure{
		{ID: ids[0], LeaseToken: cs[ids[0]].LeaseToken, WorkerID: cs[ids[0]].WorkerID, Error: strings.Repeat("€", 1000), Reason: job.ReasonError},
		{ID: ids[1], LeaseToken: cs[ids[1]].LeaseToken, WorkerID: cs[ids[1]].WorkerID, Error: "nul\x00byte", Reason: "odd\x00reason"},
		{ID: ids[2], LeaseToken: cs[ids[2]].LeaseToken, WorkerID: cs[ids[2]].WorkerID, Error: "bad utf-8 \xff\xfe", Reason: job.ReasonError},
	}, fixedPolicy(time.Hour))
	if err != nil {
		t.Fatalf("fail batch: %v", err)
	}
	if len(out) != 3 {
		t.Errorf("applied %d failures, want 3", len(out))
	}
	j := e.get(t, ids[0])
	if len(j.LastError) > 2048 || !strings.HasPrefix(strings.Repeat("€", 1000), j.LastError) || len(j.LastError) < 2040 {
		t.Errorf("long error stored as %d bytes %q…", len(j.LastError), j.LastError[:min(len(j.LastError), 12)])
	}
	if j := e.get(t, ids[1]); j.State != job.StateRetrying || !strings.HasPrefix(j.LastError, "nul") {
		t.Errorf("error with NUL: %s %q", j.State, j.LastError)
	}
	if j := e.get(t, ids[2]); j.State != job.StateRetrying || !strings.HasPrefix(j.LastError, "bad utf-8") {
		t.Errorf("invalid UTF-8 error: %s %q", j.State, j.LastError)
	}

	fin, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{
		{ID: ids[3], LeaseToken: cs[ids[3]].LeaseToken, WorkerID: cs[ids[3]].WorkerID, Result: json.RawMessage(`{"s":"a\u0000b","k\u0000":1.50,"esc":"\\u0000","big":12345678901234567890}`)},
		{ID: ids[4], LeaseToken: cs[ids[4]].LeaseToken, WorkerID: cs[ids[4]].WorkerID, Result: json.RawMessage("[\"\\ud800\", \"\xff\", \"\\u00e9\"]")},
	})
	if err != nil {
		t.Fatalf("complete with unstorable text in the results: %v", err)
	}
	if len(fin) != 2 {
		t.Fatalf("completed %d jobs, want 2", len(fin))
	}
	j = e.get(t, ids[3])
	if j.State != job.StateCompleted || !jsonEqual(t, j.Result, []byte(`{"s":"ab","k":1.50,"esc":"\\u0000","big":12345678901234567890}`)) {
		t.Errorf("job %s result %s", j.State, j.Result)
	}
	j = e.get(t, ids[4])
	if j.State != job.StateCompleted || !jsonEqual(t, j.Result, []byte(`["\ufffd","\ufffd","é"]`)) {
		t.Errorf("job %s result %s", j.State, j.Result)
	}
}

// A finished attempt records the handler's start reported by its worker,
// kept between the lease time and the moment the result is recorded; an
// unknown start keeps the lease time.
func TestFinishedAttemptRecordsHandlerStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 5, "s", 3)
	cs := e.claim(t, nil, "w", "w", "w", "w", "w")
	leasedAt := make(map[int64]time.Time, len(ids))
	for _, id := range ids {
		leasedAt[id] = *e.get(t, id).StartedAt
	}
	// PostgreSQL's clock is this machine's: a start 300 ms after the lease
	// is inside the attempt.
	inside := leasedAt[ids[0]].Add(300 * time.Millisecond)
	testwait.For(t, 5*time.Second, "PostgreSQL's clock to pass the reported start", func() bool { return e.now(t).After(inside) })
	if _, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{
		{ID: ids[0], LeaseToken: cs[ids[0]].LeaseToken, WorkerID: cs[ids[0]].WorkerID, StartedAt: inside},
		{ID: ids[1], LeaseToken: cs[ids[1]].LeaseToken, WorkerID: cs[ids[1]].WorkerID, StartedAt: leasedAt[ids[1]].Add(-time.Hour)}, // clock behind
		{ID: ids[2], LeaseToken: cs[ids[2]].LeaseToken, WorkerID: cs[ids[2]].WorkerID, StartedAt: time.Now().Add(time.Hour)},        // clock ahead
		{ID: ids[3], LeaseToken: cs[ids[3]].LeaseToken, WorkerID: cs[ids[3]].WorkerID},                                              // unknown
	}); err != nil {
		t.Fatal(err)
	}
	failInside := leasedAt[ids[4]].Add(200 * time.Millisecond)
	e.fail(t, fixedPolicy(time.Hour), store.Failure{ID: ids[4], LeaseToken: cs[ids[4]].LeaseToken, WorkerID: cs[ids[4]].WorkerID, Error: "x",
		Reason: job.ReasonError, StartedAt: failInside})

	if got := *e.get(t, ids[0]).StartedAt; !got.Equal(inside) {
		t.Errorf("reported start inside the attempt: started_at = %v, want %v", got, inside)
	}
	if got := *e.get(t, ids[1]).StartedAt; !got.Equal(leasedAt[ids[1]]) {
		t.Errorf("start before the lease: started_at = %v, want the lease time %v", got, leasedAt[ids[1]])
	}
	j := e.get(t, ids[2])
	if !j.StartedAt.Equal(*j.FinishedAt) {
		t.Errorf("start in the future: started_at = %v, want finished_at %v", *j.StartedAt, *j.FinishedAt)
	}
	if got := *e.get(t, ids[3]).StartedAt; !got.Equal(leasedAt[ids[3]]) {
		t.Errorf("unknown start: started_at = %v, want the lease time %v", got, leasedAt[ids[3]])
	}
	if j := e.get(t, ids[4]); j.State != job.StateRetrying || !j.StartedAt.Equal(failInside) {
		t.Errorf("failed attempt: state %s, started_at = %v, want retrying and %v", j.State, *j.StartedAt, failInside)
	}
}

// The claim keeps to its indexes in a session whose cached plan was made
// while the table was nearly empty (as on a fresh install): a sequential
// scan there costs milliseconds per claim once the table has grown, on the
// path of every job's start.
func TestClaimPlanKeepsToIndexesAfterTheTableGrows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conn, err := pgx.Connect(e.ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(e.ctx)
	claim := func() int {
		t.Helper()
		var n int
		if err := conn.QueryRow(e.ctx, `SELECT count(*) FROM dts_claim_jobs($1, NULL, $2, $3, 10000)`,
			e.epoch, []string{"w", "w"}, []int64{1, 2}).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := conn.Exec(e.ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	e.insertN(t, 2, "p", 0)
	if n := claim(); n != 2 {
		t.Fatalf("first claim leased %d, want 2", n)
	}
	e.exec(t, `INSERT INTO jobs (name) SELECT 'p' FROM generate_series(1, 20000)`)
	tx, err := conn.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(e.ctx) //nolint:errcheck // read-only check
	var n int
	if err := tx.QueryRow(e.ctx, `SELECT count(*) FROM dts_claim_jobs($1, NULL, $2, $3, 10000)`, e.epoch, []string{"w", "w"}, []int64{1, 2}).Scan(&n); err != nil {
		t.Fatal(err)
	}
	var seqScans int64
	if err := tx.QueryRow(e.ctx, `SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'jobs'`).Scan(&seqScans); err != nil {
		t.Fatal(err)
	}
	if n != 2 || seqScans != 0 {
		t.Errorf("claim on the grown table leased %d with %d sequential scans of jobs; want 2 and 0", n, seqScans)
	}
}
