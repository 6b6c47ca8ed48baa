package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// TestErrorFingerprint: dts_error_fingerprint (functions.sql), the one
// place of the rule, on examples of each placeholder; errors that differ
// only in what varies get the same fingerprint.
func TestErrorFingerprint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct{ in, want string }{
		{"timeout after 30s", "timeout after <dur>"},
		{"job 12345 failed after 3.5s (attempt 2)", "job <n> failed after <dur> (attempt <n>)"},
		{"request took 1m30.5s, limit 250ms", "request took <dur>, limit <dur>"},
		{"waited 30 seconds for the lock, then 2 min", "waited <dur> for the lock, then <dur>"},
		{"dial tcp 10.0.0.5:5432: connect: connection refused", "dial tcp <ip>: connect: connection refused"},
		{"dial tcp [::1]:6379: connect: connection refused", "dial tcp <ip>: connect: connection refused"},
		{"échec de connexion à 192.168.1.1", "échec de connexion à <ip>"},
		{`pq: duplicate key value violates unique constraint "users_email_key"`, "pq: duplicate key value violates unique constraint <str>"},
		{`open '/tmp/x 1.txt': can't read`, "open <str>: can't read"},
		{"can't parse `a b` near 'x'", "can't parse <str> near <str>"},
		{"GET https://api.example.com/v1/users/42?x=1: 503 Service Unavailable", "GET <url>: <n> Service Unavailable"},
		{"mail to bob.smith+x@example.co.uk bounced (550)", "mail to <email> bounced (<n>)"},
		{"user 550e8400-e29b-41d4-a716-446655440000 not found", "user <uuid> not found"},
		{"segmentation violation code=0x1 addr=0x18 pc=0x4a2b3c", "segmentation violation code=<hex> addr=<hex> pc=<hex>"},
		{"object 3f2a9c1e missing, deadbeef is a word", "object <hex> missing, deadbeef is a word"},
		{"version v1.2.3 refused", "version v<n>.<n> refused"},
		{"first line 1\nsecond line 2", "first line <n>"},
		{"\r\n  \n  the real error 7\nmore", "the real error <n>"},
		{"a\t\tb   c\x01d ", "a b c d"},
		{"<script>alert(1)</script>", "<script>alert(<n>)</script>"},
		{"lease expired", "lease expired"},
		{"", "<empty>"},
		{" \n\t", "<empty>"},
		{strings.Repeat("x", 1000), strings.Repeat("x", 200)},
		{strings.Repeat("é", 300), strings.Repeat("é", 200)},
	} {
		var got string
		e.scalar(t, &got, `SELECT dts_error_fingerprint($1)`, tc.in)
		if got != tc.want {
			t.Errorf("dts_error_fingerprint(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	var null string
	e.scalar(t, &null, `SELECT dts_error_fingerprint(NULL)`)
	if null != "<empty>" {
		t.Errorf("dts_error_fingerprint(NULL) = %q, want <empty>", null)
	}
}

// fingerprintOf reads a job's stored fingerprint ("" for NULL).
func (e *env) fingerprintOf(t *testing.T, id int64) string {
	t.Helper()
	var fp *string
	e.scalar(t, &fp, `SELECT error_fingerprint FROM jobs WHERE id = $1`, id)
	if fp == nil {
		return ""
	}
	return *fp
}

// TestDeadJobsGetAFingerprint: every way into the DLQ (a permanent error,
// retries exhausted, a dead worker's lease reclaimed, an expired lease
// reclaimed) stores the fingerprint of the error the job died with; a
// retry, a completion and a cancel store none; a requeue clears it.
func TestDeadJobsGetAFingerprint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 6, "f", 0)
	cs := e.claim(t, nil, "w1", "w1", "w1", "w1", "w1", "w1")
	permanent, exhausted, reclaimed, expired, completed, retried := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]
	e.exec(t, `UPDATE jobs SET max_retries = 1 WHERE id = $1`, retried)
	e.fail(t, noRetryPolicy(t), store.Failure{ID: permanent, LeaseToken: cs[permanent].LeaseToken, WorkerID: "w1",
		Error: "bad input at byte 17\nstack...", Reason: job.ReasonPermanent, Permanent: true})
	e.fail(t, noRetryPolicy(t), store.Failure{ID: exhausted, LeaseToken: cs[exhausted].LeaseToken, WorkerID: "w1",
		Error: "HTTP 503 from https://x.example/1", Reason: job.ReasonError})
	e.fail(t, fixedPolicy(time.Hour), store.Failure{ID: retried, LeaseToken: cs[retried].LeaseToken, WorkerID: "w1",
		Error: "try again in 5s", Reason: job.ReasonError})
	if _, err := e.s.JobReclaimLeases(e.ctx, e.epoch, []store.Release{{ID: reclaimed, LeaseToken: cs[reclaimed].LeaseToken, WorkerID: "w1"}},
		noRetryPolicy(t)); err != nil {
		t.Fatal(err)
	}
	e.exec(t, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, expired)
	if _, err := e.s.JobReclaimExpired(e.ctx, e.epoch, nil, noRetryPolicy(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{{ID: completed, LeaseToken: cs[completed].LeaseToken, WorkerID: "w1"}}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]string{
		permanent: "bad input at byte <n>",
		exhausted: "HTTP <n> from <url>",
		reclaimed: "worker w<n> stopped heartbeating",
		expired:   "lease expired",
		completed: "",
		retried:   "",
	} {
		if got := e.fingerprintOf(t, id); got != want {
			t.Errorf("job %d (%s): fingerprint %q, want %q", id, e.get(t, id).State, got, want)
		}
	}
	if err := e.s.JobRequeueDead(e.ctx, permanent, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := e.s.JobBulkRequeue(e.ctx, store.JobBulkParams{States: []job.State{job.StateFailed}, Name: "f"}); err != nil || n != 3 {
		t.Fatalf("bulk requeue: %d, %v", n, err)
	}
	var left int
	e.scalar(t, &left, `SELECT count(*) FROM jobs WHERE error_fingerprint IS NOT NULL`)
	if left != 0 {
		t.Errorf("%d requeued jobs kept a fingerprint", left)
	}
}

// TestJobRequeueDeadWithPayload: a requeue may replace the payload; a
// refused one (the job is not dead) changes nothing.
func TestJobRequeueDeadWithPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 2, "p", 0)
	dead, live := ids[0], ids[1]
	c := e.claimOne(t, dead, "w")
	e.fail(t, noRetryPolicy(t), store.Failure{ID: dead, LeaseToken: c.LeaseToken, WorkerID: "w", Error: "bad", Reason: job.ReasonPermanent, Permanent: true})
	if err := e.s.JobRequeueDead(e.ctx, dead, json.RawMessage(`{"fixed":true,"n":[1,2]}`)); err != nil {
		t.Fatal(err)
	}
	j := e.get(t, dead)
	if j.State != job.StatePending || j.Attempts != 0 || j.FinishedAt != nil || !jsonEqual(t, j.Payload, []byte(`{"n":[1,2],"fixed":true}`)) {
		t.Errorf("requeued with a payload: %+v, payload %s", j, j.Payload)
	}
	if len(j.Errors) != 1 || j.LastError != "bad" {
		t.Errorf("the error history went: %+v", j.Errors)
	}
	if err := e.s.JobRequeueDead(e.ctx, live, json.RawMessage(`"other"`)); !errors.Is(err, job.ErrConflict) {
		t.Errorf("requeue a pending job: %v, want ErrConflict", err)
	}
	if p := e.get(t, live).Payload; !jsonEqual(t, p, []byte(`{"i":1}`)) {
		t.Errorf("a refused requeue changed the payload to %s", p)
	}
}

// killWith makes jobs dead with an error, as the fail path leaves them.
func (e *env) killWith(t *testing.T, ids []int64, errText string) {
	t.Helper()
	e.exec(t, `UPDATE jobs SET status = 'failed', finished_at = now(), dead_reason = 'permanent', last_error = $2,
		error_fingerprint = dts_error_fingerprint($2) WHERE id = ANY($1)`, ids, errText)
}

// TestDeadGroups: the dead jobs by name and fingerprint, the largest
// first, with the number of groups and of dead jobs, each group's newest
// failure and a sample error; a job made dead by hand, without a
// fingerprint, is a group of its own.
func TestDeadGroups(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mail := e.insertN(t, 12, "mail", 0)
	for i, id := range mail[:7] {
		e.killWith(t, []int64{id}, fmt.Sprintf("dial tcp 10.0.0.%d:25: connection refused", i))
	}
	for i, id := range mail[7:10] {
		e.killWith(t, []int64{id}, fmt.Sprintf(`user "u%d" not found`, i))
	}
	e.exec(t, `UPDATE jobs SET finished_at = now() + interval '1 minute' WHERE id = $1`, mail[9])
	report := e.insertN(t, 4, "report", 0)
	e.killWith(t, report[:3], "dial tcp 10.0.0.1:25: connection refused")
	e.exec(t, `UPDATE jobs SET status = 'failed', finished_at = now(), last_error = 'by hand' WHERE id = $1`, report[3])

	got, err := e.s.DeadGroups(e.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		name, fp string
		n        int64
	}
	want := []row{
		{"mail", "dial tcp <ip>: connection refused", 7},
		{"mail", "user <str> not found", 3},
		{"report", "dial tcp <ip>: connection refused", 3},
		{"report", "", 1},
	}
	if len(got.Groups) != len(want) || got.Total != 4 || got.Dead != 14 {
		t.Fatalf("groups %+v, total %d, dead %d; want %v, 4 groups, 14 dead", got.Groups, got.Total, got.Dead, want)
	}
	for i, w := range want {
		g := got.Groups[i]
		if g.Name != w.name || g.Fingerprint != w.fp || g.Count != w.n {
			t.Errorf("group %d = %+v, want %+v", i, g, w)
		}
	}
	if g := got.Groups[0]; g.NewestID != mail[6] || g.Sample != "dial tcp 10.0.0.6:25: connection refused" || g.LastFailed.IsZero() {
		t.Errorf("the largest group's newest job %d, sample %q, last failed %v", g.NewestID, g.Sample, g.LastFailed)
	}
	if last := got.Groups[1].LastFailed; last.Before(time.Now().Add(30 * time.Second)) {
		t.Errorf("the group's newest failure is %v, want the job failed a minute ahead", last)
	}
	top, err := e.s.DeadGroups(e.ctx, 1)
	if err != nil || len(top.Groups) != 1 || top.Total != 4 || top.Dead != 14 || top.Groups[0].Count != 7 {
		t.Errorf("the largest group only: %+v, %v", top, err)
	}
	// The group's jobs, as its link on the console lists them.
	list, next, err := e.s.JobList(e.ctx, store.JobListParams{Name: "mail", Fingerprint: "user <str> not found", Limit: 2})
	if err != nil || len(list) != 2 || list[0].ID != mail[9] || list[1].ID != mail[8] || next != mail[8] {
		t.Errorf("list of a group: %v, next %d, %v", list, next, err)
	}
	list, _, err = e.s.JobList(e.ctx, store.JobListParams{Name: "mail", Fingerprint: "user <str> not found", State: job.StatePending})
	if err != nil || len(list) != 0 {
		t.Errorf("a group's pending jobs: %v, %v", list, err)
	}
	if _, _, err := e.s.JobList(e.ctx, store.JobListParams{Fingerprint: "user <str> not found"}); err == nil {
		t.Errorf("a fingerprint without a name was listed")
	}
	dead, _, err := e.s.DeadListPage(e.ctx, store.DeadListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		if want := e.fingerprintOf(t, d.Job.ID); d.Fingerprint != want {
			t.Errorf("DLQ entry %d: fingerprint %q, want %q", d.Job.ID, d.Fingerprint, want)
		}
	}
}

// TestOperationOnADeadGroup: an operation with a fingerprint requeues
// exactly the dead jobs of its group, the count of its confirmation too,
// in batches.
func TestOperationOnADeadGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insertN(t, 30, "g", 0)
	others := e.insertN(t, 5, "h", 0)
	group := ids[:23]
	e.killWith(t, group, "timeout after 30s")
	e.killWith(t, ids[23:], "timeout: 'x'")
	e.killWith(t, others, "timeout after 30s")
	f := store.OperationFilter{States: []job.State{job.StateFailed}, Name: "g", Fingerprint: "timeout after <dur>"}
	op := newOp(t, e, "requeue", f, "s1")
	if op.Matched != 23 || op.Filter.Fingerprint != "timeout after <dur>" {
		t.Fatalf("created %+v", op)
	}
	end, steps := runOp(t, e, op.ID, "s1", 10)
	if end.State != store.OperationDone || end.Affected != 23 || steps != 3 {
		t.Errorf("end %+v after %d steps", end, steps)
	}
	requeued := e.ids(t, `SELECT id FROM jobs WHERE status = 'pending' ORDER BY id`)
	if fmt.Sprint(requeued) != fmt.Sprint(group) {
		t.Errorf("requeued %v, want the group %v", requeued, group)
	}
	if _, err := e.s.OperationCount(e.ctx, "requeue", store.OperationFilter{States: []job.State{job.StateFailed}, Fingerprint: "x"}); err == nil {
		t.Errorf("a count by fingerprint without a name went through")
	}
}

// TestMigrationBackfillsFingerprints: a database with dead jobs from
// before migration 015 gets their fingerprints when it is applied.
func TestMigrationBackfillsFingerprints(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := migratedPool(t)
	if _, err := pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`); err != nil {
		t.Fatal(err)
	}
	all := migrationFiles(t)
	before := fstest.MapFS{}
	for name, f := range all {
		if name < "migrations/015" {
			before[name] = f
		}
	}
	if len(before) >= len(all) {
		t.Fatalf("no migration 015 among %d files", len(all))
	}
	if err := store.MigrateFS(ctx, pool, before); err != nil {
		t.Fatalf("migrate to 014: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO jobs (name, status, last_error, finished_at) VALUES
		('a', 'failed', 'timeout after 30s', now()), ('a', 'failed', NULL, now()), ('a', 'completed', 'timeout after 1s', now())`); err != nil {
		t.Fatal(err)
	}
	if err := store.MigrateFS(ctx, pool, all); err != nil {
		t.Fatalf("migrate to the end: %v", err)
	}
	rows, err := pool.Query(ctx, `SELECT status, coalesce(error_fingerprint, 'NULL') FROM jobs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var st, fp string
		if err := rows.Scan(&st, &fp); err != nil {
			t.Fatal(err)
		}
		got = append(got, st+" "+fp)
	}
	if want := []string{"failed timeout after <dur>", "failed <empty>", "completed NULL"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after the migration: %q, want %q", got, want)
	}
}
