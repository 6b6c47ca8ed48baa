package submitter_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter"
)

// seedDead makes n failed jobs named name in queue.
func (e *env) seedDead(n int, name, queue string) {
	e.t.Helper()
	e.exec(`INSERT INTO jobs (name, queue, payload, status, attempts, max_retries, finished_at, dead_reason)
		SELECT $1, $2, '1', 'failed', 4, 3, now(), 'permanent' FROM generate_series(1, $3)`, name, queue, n)
}

func (e *env) operation(id string) wire.Operation {
	e.t.Helper()
	var op wire.Operation
	status, b := e.do("GET", "/operations/"+id, "")
	e.must(http.StatusOK, &op, status, b)
	return op
}

func TestBulkBackgroundRequeue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seedDead(2500, "dead", "mail")
	e.seedDead(7, "dead", "default")

	// A dry run by queue counts; without background a queue filter is refused.
	var dry wire.BulkResponse
	status, b := e.do("POST", "/jobs/bulk", `{"action":"requeue","queue":"mail","dry_run":true}`)
	e.must(http.StatusOK, &dry, status, b)
	if dry.Matched != 2500 || !dry.DryRun || dry.OperationID != "" {
		t.Fatalf("dry run %+v", dry)
	}
	if status, b := e.do("POST", "/jobs/bulk", `{"action":"requeue","queue":"mail"}`); status != 400 || !strings.Contains(string(b), "background") {
		t.Errorf("queue without background: %d %s", status, b)
	}
	if status, b := e.do("POST", "/jobs/bulk", `{"action":"requeue","queue":"bad queue!","background":true}`); status != 400 || !strings.Contains(string(b), "queue") {
		t.Errorf("bad queue: %d %s", status, b)
	}
	if n := e.count(`SELECT count(*) FROM jobs WHERE status = 'failed'`); n != 2507 {
		t.Fatalf("refused requests changed jobs: %d failed", n)
	}

	var started wire.BulkResponse
	status, b = e.do("POST", "/jobs/bulk", `{"action":"requeue","queue":"mail","background":true}`)
	e.must(http.StatusAccepted, &started, status, b)
	if started.Matched != 2500 || started.OperationID == "" {
		t.Fatalf("started %+v", started)
	}
	var op wire.Operation
	testwait.For(t, 5*time.Second, "the operation to end", func() bool {
		op = e.operation(started.OperationID)
		return op.State != wire.OperationRunning
	})
	if op.State != wire.OperationDone || op.Affected != 2500 || op.Processed != 2500 || op.Matched != 2500 || op.Queue != "mail" ||
		op.FinishedAt == nil || op.Actor != "anonymous" {
		t.Errorf("operation %+v", op)
	}
	if n := e.count(`SELECT count(*) FROM jobs WHERE status = 'pending' AND queue = 'mail'`); n != 2500 {
		t.Errorf("%d mail jobs pending, want 2500", n)
	}
	if n := e.count(`SELECT count(*) FROM jobs WHERE status = 'failed' AND queue = 'default'`); n != 7 {
		t.Errorf("%d default jobs still failed, want 7", n)
	}
	// The audit row got the outcome.
	testwait.For(t, 5*time.Second, "the audit outcome", func() bool {
		return e.count(`SELECT count(*) FROM audit_log WHERE action = 'job.bulk' AND details->>'result' = 'done'
			AND (details->>'affected')::int = 2500 AND details->>'operation_id' = $1`, started.OperationID) == 1
	})
	// Nothing matched: no operation.
	status, b = e.do("POST", "/jobs/bulk", `{"action":"requeue","queue":"mail","background":true}`)
	var none wire.BulkResponse
	e.must(http.StatusOK, &none, status, b)
	if none.Matched != 0 || none.OperationID != "" {
		t.Errorf("nothing matched: %+v", none)
	}
	var list wire.OperationListResponse
	status, b = e.do("GET", "/operations", "")
	e.must(http.StatusOK, &list, status, b)
	if len(list.Operations) != 1 || list.Operations[0].OperationID != started.OperationID {
		t.Errorf("list %+v", list)
	}
	for path, want := range map[string]int{"/operations/999999": 404, "/operations/abc": 400, "/operations/999999/cancel": 404} {
		method := "GET"
		if strings.HasSuffix(path, "cancel") {
			method = "POST"
		}
		if status, b := e.do(method, path, ""); status != want {
			t.Errorf("%s %s: %d %s, want %d", method, path, status, b, want)
		}
	}
	if status, b := e.do("POST", "/operations/"+started.OperationID+"/cancel", ""); status != http.StatusConflict {
		t.Errorf("cancel of an ended operation: %d %s", status, b)
	}
}

// TestOperationCanceledAndTakenOver: a cancel stops an operation between
// batches; an operation whose submitter stopped goes on in another.
func TestOperationCanceledAndTakenOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seedDead(5, "dead", "default")
	// An operation left running by a submitter that vanished (its lease ran out).
	e.exec(`INSERT INTO operations (id, action, states, matched, actor, owner, lease_until)
		VALUES (77, 'requeue', '{failed}', 5, 'apikey:1', 'gone', now() - interval '1 second')`)
	var op wire.Operation
	const sweep = 15 * time.Second // the sweep runs every 5 s
	testwait.For(t, sweep, "the abandoned operation to be taken over", func() bool {
		op = e.operation("77")
		return op.State == wire.OperationDone
	})
	if op.Affected != 5 {
		t.Errorf("taken over: %+v", op)
	}

	// A running operation (held by a live owner) is canceled.
	e.exec(`INSERT INTO operations (id, action, states, matched, actor, owner, lease_until)
		VALUES (78, 'delete', '{completed}', 0, 'apikey:1', 'other', now() + interval '1 hour')`)
	var c wire.Operation
	status, b := e.do("POST", "/operations/78/cancel", "")
	e.must(http.StatusOK, &c, status, b)
	if c.State != wire.OperationCanceled || c.CanceledBy != "anonymous" || c.FinishedAt == nil {
		t.Errorf("canceled %+v", c)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'operation.cancel' AND target_id = '78' AND details->>'result' = 'ok'`); n != 1 {
		t.Errorf("cancel audit rows: %d", n)
	}
}

func TestDrainAndRunNowAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(`INSERT INTO workers (id, concurrency, state, host, version, last_heartbeat_at) VALUES ('w<1>', 4, 'available', 'h1', 'v1', now())`)
	r := e.submit(`{"name":"later","delay_seconds":3600}`)
	e.exec(`UPDATE jobs SET status = 'leased', worker_id = 'w<1>', lease_token = 5 WHERE id = (SELECT max(id) FROM jobs)`)
	r2 := e.submit(`{"name":"later","delay_seconds":7200}`)

	var w wire.Worker
	status, b := e.do("GET", "/workers/w%3C1%3E", "")
	e.must(http.StatusOK, &w, status, b)
	if w.Host != "h1" || w.Version != "v1" || len(w.LeasedJobs) != 1 || w.LeasedJobs[0] != r.JobID || w.DrainRequestedAt != nil {
		t.Errorf("worker %+v", w)
	}
	status, b = e.do("POST", "/workers/w%3C1%3E/drain", "")
	e.must(http.StatusOK, &w, status, b)
	if w.DrainRequestedAt == nil || w.DrainRequestedBy != "anonymous" {
		t.Errorf("drained %+v", w)
	}
	if status, _ := e.do("POST", "/workers/nope/drain", ""); status != 404 {
		t.Errorf("drain unknown: %d", status)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'worker.drain' AND target_id = 'w<1>'`); n != 1 {
		t.Errorf("drain audit rows %d", n)
	}
	// Undrain withdraws the request: the row the leader's sync reads
	// (WorkerDrainList) no longer has the flag. Repeating it is harmless.
	for range 2 {
		var un wire.Worker
		status, b = e.do("POST", "/workers/w%3C1%3E/undrain", "")
		e.must(http.StatusOK, &un, status, b)
		if un.WorkerID != "w<1>" || un.DrainRequestedAt != nil || un.DrainRequestedBy != "" {
			t.Errorf("undrained %+v", un)
		}
	}
	if n := e.count(`SELECT count(*) FROM workers WHERE drain_requested_at IS NOT NULL OR drain_requested_by IS NOT NULL`); n != 0 {
		t.Errorf("%d workers still asked to drain after undrain", n)
	}
	if status, _ := e.do("POST", "/workers/nope/undrain", ""); status != 404 {
		t.Errorf("undrain unknown: %d", status)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'worker.undrain' AND target_id = 'w<1>' AND details->>'result' = 'ok'`); n != 2 {
		t.Errorf("undrain audit rows %d, want 2", n)
	}

	var page wire.ScheduledJobsResponse
	status, b = e.do("GET", "/jobs/scheduled", "")
	e.must(http.StatusOK, &page, status, b)
	if len(page.Jobs) != 1 || page.Jobs[0].JobID != r2.JobID {
		t.Fatalf("scheduled %s", b)
	}
	var ran wire.SubmitResponse
	status, b = e.do("POST", "/jobs/"+r2.JobID+"/run_now", "")
	e.must(http.StatusOK, &ran, status, b)
	if j := e.getJob(r2.JobID); j.NextRunAt == nil || time.Until(*j.NextRunAt) > time.Second {
		t.Errorf("after run now: %+v", j.NextRunAt)
	}
	if status, b := e.do("POST", "/jobs/"+r2.JobID+"/run_now", ""); status != http.StatusConflict {
		t.Errorf("run now twice: %d %s", status, b)
	}
	// Bad input: a clear 4xx, and nothing changes.
	for _, rq := range []struct{ method, path, body string }{
		{"GET", "/jobs/scheduled?cursor=junk", ""},
		{"GET", "/jobs/scheduled?cursor=12-x", ""},
		{"POST", "/workers/" + strings.Repeat("w", 201) + "/drain", ""},
		{"POST", "/workers/" + strings.Repeat("w", 201) + "/undrain", ""},
		{"POST", "/jobs/abc/run_now", ""},
		{"POST", "/jobs/bulk", `{"action":"requeue","background":true,"name":"a\u0000b"}`},
		{"POST", "/jobs/bulk", `{"action":"requeue","background":true,"status":"pending"}`},
		{"POST", "/jobs/bulk", `{"action":"explode","background":true}`},
		{"POST", "/jobs/bulk", `{"action":"requeue","background":"yes"}`},
	} {
		if status, b := e.do(rq.method, rq.path, rq.body); status != 400 {
			t.Errorf("%s %s %s: %d %s, want 400", rq.method, rq.path, rq.body, status, b)
		}
	}
	if n := e.count(`SELECT count(*) FROM operations`); n != 0 {
		t.Errorf("bad requests made %d operations", n)
	}
}

// TestOpsRoutesNeedAdmin: the read scope reads operations and the
// scheduled jobs, and gets 403 on every new action.
func TestOpsRoutesNeedAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *submitter.Config) { c.Auth = auth.Config{APIKeys: true} })
	key, hash := auth.NewAPIKey()
	e.exec(`INSERT INTO api_keys (name, hash, scopes) VALUES ('viewer', $1, '{read}')`, hash)
	h := []string{"Authorization", "Bearer " + key}
	for _, rq := range []struct{ method, path, body string }{
		{"POST", "/workers/w1/drain", ""},
		{"POST", "/workers/w1/undrain", ""},
		{"POST", "/jobs/1/run_now", ""},
		{"POST", "/operations/1/cancel", ""},
		{"POST", "/jobs/bulk", `{"action":"requeue","background":true}`},
	} {
		if status, b := e.do(rq.method, rq.path, rq.body, h...); status != http.StatusForbidden {
			t.Errorf("%s %s as read: %d %s", rq.method, rq.path, status, b)
		}
	}
	for _, path := range []string{"/operations", "/jobs/scheduled"} {
		if status, b := e.do("GET", path, "", h...); status != http.StatusOK {
			t.Errorf("GET %s as read: %d %s", path, status, b)
		}
	}
}
