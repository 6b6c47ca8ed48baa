package store_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// uniq is a unique job named name with payload, claimed for an hour.
func uniq(name, payload string, opts ...func(*store.Unique)) store.JobInsertParams {
	u := &store.Unique{For: time.Hour}
	for _, o := range opts {
		o(u)
	}
	return store.JobInsertParams{Name: name, Payload: json.RawMessage(payload), Unique: u}
}

// expireClaims moves every claim's window into the past.
func (e *env) expireClaims(t *testing.T) {
	t.Helper()
	e.exec(t, `UPDATE job_unique_claims SET expires_at = clock_timestamp() - interval '1 second'`)
}

func (e *env) countJobs(t *testing.T) int64 {
	t.Helper()
	var n int64
	e.scalar(t, &n, `SELECT count(*) FROM jobs`)
	return n
}

func TestUniqueRepeatInWindowAnswersFirstJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.insertRes(t, uniq("report", `{"user":1,"day":"mon"}`))[0]
	if !first.Created {
		t.Fatalf("first insert: %+v", first)
	}
	// The same payload with other key order and spacing is the same job.
	again := e.insertRes(t, uniq("report", `{ "day": "mon", "user": 1 }`))[0]
	if again.Created || again.ID != first.ID {
		t.Fatalf("repeat = %+v, want job %d not created", again, first.ID)
	}
	// Another payload, name or queue is another job; so is a job without
	// unique_for, which ignores claims.
	other := uniq("report", `{"user":2,"day":"mon"}`)
	otherName := uniq("report2", `{"user":1,"day":"mon"}`)
	otherQueue := uniq("report", `{"user":1,"day":"mon"}`)
	otherQueue.Queue = "q2"
	plain := store.JobInsertParams{Name: "report", Payload: json.RawMessage(`{"user":1,"day":"mon"}`)}
	for i, r := range e.insertRes(t, other, otherName, otherQueue, plain) {
		if !r.Created || r.ID == first.ID {
			t.Errorf("job %d: %+v, want a new job", i, r)
		}
	}
}

func TestUniqueExplicitKeyIgnoresPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := func(u *store.Unique) { u.Key = "customer-7" }
	a := e.insertRes(t, uniq("sync", `{"n":1}`, key))[0]
	b := e.insertRes(t, uniq("sync", `{"n":2}`, key))[0]
	if !a.Created || b.Created || b.ID != a.ID {
		t.Fatalf("same key, other payloads: %+v then %+v, want one job", a, b)
	}
	// Without the key, the payload decides.
	c := e.insertRes(t, uniq("sync", `{"n":1}`))[0]
	if !c.Created {
		t.Fatalf("no key: %+v, want a new job", c)
	}
}

func TestUniqueClaimEndsWithWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.insertRes(t, uniq("x", `1`))[0]
	e.expireClaims(t)
	b := e.insertRes(t, uniq("x", `1`))[0]
	if !b.Created || b.ID == a.ID {
		t.Fatalf("after the window: %+v, want a new job", b)
	}
	// b holds the key now.
	c := e.insertRes(t, uniq("x", `1`))[0]
	if c.Created || c.ID != b.ID {
		t.Fatalf("inside b's window: %+v, want job %d", c, b.ID)
	}
}

func TestUniqueClaimEndsWhenJobLeavesStates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	active := func(u *store.Unique) {
		u.States = []job.State{job.StatePending, job.StateWaiting, job.StateRetrying, job.StateLeased}
	}
	a := e.insertRes(t, uniq("x", `1`, active))[0]
	e.complete(t, a.ID, `null`)
	b := e.insertRes(t, uniq("x", `1`, active))[0]
	if !b.Created || b.ID == a.ID {
		t.Fatalf("after the first completed (completed not counted): %+v, want a new job", b)
	}
	e.complete(t, b.ID, `null`)

	// The default states count a completed job for the rest of the window,
	// but not a failed one.
	c := e.insertRes(t, uniq("y", `1`))[0]
	e.complete(t, c.ID, `null`)
	if d := e.insertRes(t, uniq("y", `1`))[0]; d.Created || d.ID != c.ID {
		t.Fatalf("completed, default states: %+v, want job %d", d, c.ID)
	}
	f := e.insertRes(t, uniq("z", `1`))[0]
	e.failFor(t, f.ID)
	if g := e.insertRes(t, uniq("z", `1`))[0]; !g.Created {
		t.Fatalf("failed, default states: %+v, want a new job", g)
	}
}

func TestUniqueDeletedJobFreesKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.insertRes(t, uniq("x", `1`))[0]
	e.exec(t, `DELETE FROM jobs WHERE id = $1`, a.ID)
	if b := e.insertRes(t, uniq("x", `1`))[0]; !b.Created {
		t.Fatalf("after the first job was deleted: %+v, want a new job", b)
	}
}

func TestUniqueConcurrentSubmitsMakeOneJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	race := func() int64 {
		const n = 20
		res := make([]store.JobInsertResult, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				var r []store.JobInsertResult
				r, errs[i] = e.s.JobInsert(e.ctx, []store.JobInsertParams{uniq("race", `{"a":[1,2]}`)})
				if errs[i] == nil {
					res[i] = r[0]
				}
			})
		}
		close(start)
		wg.Wait()
		created := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("submit %d: %v", i, errs[i])
			}
			if res[i].ID != res[0].ID {
				t.Errorf("submit %d got job %d, submit 0 job %d", i, res[i].ID, res[0].ID)
			}
			if res[i].Created {
				created++
			}
		}
		if created != 1 {
			t.Fatalf("%d submits created a job, want 1", created)
		}
		return res[0].ID
	}
	// A new key: the claimers meet on the row's insertion.
	first := race()
	// A key whose row exists with a stale claim: they meet on its lock.
	e.expireClaims(t)
	second := race()
	if second == first || e.countJobs(t) != 2 {
		t.Fatalf("jobs %d then %d, %d in all; want two jobs", first, second, e.countJobs(t))
	}
}

func TestUniqueRepeatsWithinOneCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	held := e.insertRes(t, uniq("held", `1`))[0]
	res := e.insertRes(t,
		uniq("x", `1`),
		store.JobInsertParams{Name: "plain"},
		uniq("x", `1`),
		uniq("held", `1`),
		uniq("x", `2`),
		uniq("held", `1`),
	)
	switch {
	case !res[0].Created || !res[1].Created || !res[4].Created:
		t.Fatalf("first of each key and the plain job must be created: %+v", res)
	case res[2].Created || res[2].ID != res[0].ID:
		t.Errorf("repeat of x: %+v, want job %d", res[2], res[0].ID)
	case res[3].Created || res[3].ID != held.ID || res[5].Created || res[5].ID != held.ID:
		t.Errorf("held key: %+v and %+v, want job %d", res[3], res[5], held.ID)
	}
	if n := e.countJobs(t); n != 4 {
		t.Errorf("%d jobs, want 4 (held, x, plain, x 2)", n)
	}
}

// TestUniqueRepeatAfterKeyedFirst: repeats of a key in one call get the
// answers they would get one call each, in order, when the key's first job
// is not created because its idempotency key names an unrelated job. That
// job holds no claim and is not the key's: a repeat with the same
// idempotency key gets it too, the next repeat with another (or none)
// creates the key's job, and the repeats after that one answer it. With
// parents, and without.
func TestUniqueRepeatAfterKeyedFirst(t *testing.T) {
	t.Parallel()
	for _, withParents := range []bool{false, true} {
		t.Run(fmt.Sprintf("parents=%v", withParents), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			other := e.insertRes(t, store.JobInsertParams{Name: "unrelated", IdempotencyKey: "k"})[0]
			var parent int64
			if withParents {
				parent = e.insertRes(t, store.JobInsertParams{Name: "parent"})[0].ID
			}
			x := func(key string) store.JobInsertParams {
				p := uniq("x", `1`)
				p.IdempotencyKey = key
				if withParents {
					p.DependsOn = []int64{parent}
				}
				return p
			}
			res := e.insertRes(t, x("k"), x("k"), x(""), x("k"), x(""), x("j"))
			for i := range 2 {
				if res[i].Created || res[i].ID != other.ID {
					t.Errorf("submission %d (idempotency key k): %+v, want the job %d holding k", i, res[i], other.ID)
				}
			}
			if !res[2].Created || e.get(t, res[2].ID).Name != "x" {
				t.Fatalf("submission 2 (no idempotency key): %+v, want a new job x, not the unrelated job %d", res[2], other.ID)
			}
			for i := 3; i < len(res); i++ {
				if res[i].Created || res[i].ID != res[2].ID {
					t.Errorf("submission %d: %+v, want the key's job %d", i, res[i], res[2].ID)
				}
			}
			if n := len(e.ids(t, `SELECT id FROM jobs WHERE name = 'x'`)); n != 1 {
				t.Errorf("%d jobs named x, want 1", n)
			}
			// The key's claim is x's: a later submission answers it.
			if again := e.insertRes(t, x(""))[0]; again.Created || again.ID != res[2].ID {
				t.Errorf("a later repeat: %+v, want job %d", again, res[2].ID)
			}
			if withParents {
				e.wantState(t, res[2].ID, job.StateWaiting)
				// The edge exists: the parent's completion releases x.
				e.exec(t, `UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = $1`, parent)
				e.wantState(t, res[2].ID, job.StatePending)
			}
		})
	}
}

func TestUniqueWithDependencies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	held := e.insertRes(t, uniq("parent", `1`))[0]
	// The unique parent answers the held job; the child waits on it, and
	// the callback on every job of the batch, the held one included.
	res := e.insertRes(t,
		uniq("parent", `1`),
		store.JobInsertParams{Name: "child", DependsOnIndex: []int{0}},
		store.JobInsertParams{Name: "cb", Callback: true},
	)
	if res[0].Created || res[0].ID != held.ID {
		t.Fatalf("unique parent: %+v, want job %d", res[0], held.ID)
	}
	e.wantState(t, res[1].ID, job.StateWaiting)
	e.wantState(t, res[2].ID, job.StateWaiting)
	e.complete(t, held.ID, `"ok"`)
	e.wantState(t, res[1].ID, job.StatePending)
	e.complete(t, res[1].ID, `"ok"`)
	e.wantState(t, res[2].ID, job.StatePending)
}

func TestUniqueExpiredClaimsCleanedUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 5 {
		e.insertRes(t, uniq("x", string(rune('0'+i))))
	}
	e.expireClaims(t)
	// Each key claimed deletes up to two expired claims.
	e.insertRes(t, uniq("y", `1`))
	e.insertRes(t, uniq("y", `2`))
	var n int64
	e.scalar(t, &n, `SELECT count(*) FROM job_unique_claims`)
	if n != 3 { // 5 + 2 - 4
		t.Fatalf("%d claims left, want 3", n)
	}
	e.insertRes(t, uniq("y", `3`))
	e.insertRes(t, uniq("y", `4`))
	e.scalar(t, &n, `SELECT count(*) FROM job_unique_claims WHERE expires_at <= now()`)
	if n != 0 {
		t.Fatalf("%d expired claims left, want 0", n)
	}
}
