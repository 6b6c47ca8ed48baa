package submitter_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter"
)

// killWith makes jobs dead as the fail path leaves them, error and
// fingerprint included.
func (e *env) killWith(errText string, ids ...string) {
	e.t.Helper()
	for _, id := range ids {
		e.exec(`UPDATE jobs SET status = 'failed', attempts = 1, finished_at = now(), dead_reason = 'permanent',
			last_error = $2, error_fingerprint = dts_error_fingerprint($2) WHERE id = $1`, id, errText)
	}
}

// TestRequeueWithPayload: POST /dlq/{id}/requeue with {"payload": ...}
// requeues the dead job with that payload, checked exactly as a submitted
// payload is (the same refusals, word for word); a refused one changes
// nothing and writes no audit row; the body stays optional.
func TestRequeueWithPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *submitter.Config) { c.MaxPayloadBytes = 64 })
	dead := e.submit(`{"name":"edit","payload":{"x":1}}`)
	plain := e.submit(`{"name":"edit","payload":{"y":2}}`)
	e.killWith("bad x at 12", dead.JobID, plain.JobID)

	for _, p := range []string{`"\u0000"`, `"\ud800"`, `"` + strings.Repeat("a", 70) + `"`, `1e999999`, strings.Repeat("[", 1001) + strings.Repeat("]", 1001)} {
		status, want := e.do("POST", "/submit_job", `{"name":"edit","payload":`+p+`}`)
		got, body := e.do("POST", "/dlq/"+dead.JobID+"/requeue", `{"payload":`+p+`}`)
		if status != http.StatusBadRequest || got != status || string(body) != string(want) {
			t.Errorf("payload %.40q: submit %d %s, requeue %d %s", p, status, want, got, body)
		}
	}
	for body, want := range map[string]string{
		`{"payload":{"a":1},"colour":"red"}`: "colour: unknown field",
		`[1]`:                                "must be a JSON object",
		`{"payload":`:                        "invalid_json",
		`{"payload":{"a":}}`:                 "invalid_json",
	} {
		if status, b := e.do("POST", "/dlq/"+dead.JobID+"/requeue", body); status != http.StatusBadRequest || !strings.Contains(string(b), want) {
			t.Errorf("body %s: %d %s, want 400 %q", body, status, b, want)
		}
	}
	if j := e.getJob(dead.JobID); j.Status != "failed" || string(j.Payload) != `{"x":1}` {
		t.Fatalf("refused requeues changed the job: %s %s", j.Status, j.Payload)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'job.requeue'`); n != 0 {
		t.Errorf("refused payloads wrote %d audit rows", n)
	}

	var rq wire.SubmitResponse
	status, b := e.do("POST", "/dlq/"+dead.JobID+"/requeue", `{"payload": {"x": 2, "fixed": [true]} }`)
	e.must(http.StatusOK, &rq, status, b)
	j := e.getJob(dead.JobID)
	var got map[string]any
	if err := json.Unmarshal(j.Payload, &got); err != nil || got["x"] != 2.0 || j.Status != "pending" || j.Attempts != 0 || j.FinishedAt != nil {
		t.Errorf("after the requeue with a payload: %+v payload %s", j, j.Payload)
	}
	if n := e.count(`SELECT count(*) FROM jobs WHERE id = $1 AND error_fingerprint IS NULL AND dead_reason IS NULL`, dead.JobID); n != 1 {
		t.Errorf("the requeued job kept its fingerprint or dead reason")
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'job.requeue' AND target_id = $1 AND actor = 'anonymous'
		AND details->>'result' = 'ok' AND (details->>'payload_edited')::bool AND (details->>'payload_bytes')::int = $2`,
		dead.JobID, len(`{"x":2,"fixed":[true]}`)); n != 1 {
		t.Errorf("no audit row of the requeue with its payload edited")
	}
	// No body, or no payload in it: the payload stays; null is a payload.
	for _, body := range []string{"", "{}"} {
		status, b := e.do("POST", "/dlq/"+plain.JobID+"/requeue", body)
		e.must(http.StatusOK, nil, status, b)
		if j := e.getJob(plain.JobID); j.Status != "pending" || string(j.Payload) != `{"y":2}` {
			t.Errorf("a requeue with body %q: %s %s", body, j.Status, j.Payload)
		}
		e.killWith("again", plain.JobID)
	}
	status, b = e.do("POST", "/dlq/"+plain.JobID+"/requeue", `{"payload":null}`)
	e.must(http.StatusOK, nil, status, b)
	if j := e.getJob(plain.JobID); string(j.Payload) != "null" {
		t.Errorf("requeue with a null payload: %s", j.Payload)
	}
	if status, _ := e.do("POST", "/dlq/"+plain.JobID+"/requeue", `{"payload":1}`); status != http.StatusConflict {
		t.Errorf("requeue of a pending job with a payload: %d, want 409", status)
	}
	if j := e.getJob(plain.JobID); string(j.Payload) != "null" {
		t.Errorf("a refused requeue changed the payload to %s", j.Payload)
	}
}

// TestBulkByFingerprint: GET /dlq names each dead job's fingerprint;
// POST /jobs/bulk with name and fingerprint acts on that group alone, in
// the background; a fingerprint needs a name and goes with requeue and
// delete only.
func TestBulkByFingerprint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []string
	for i := range 12 {
		ids = append(ids, e.submit(`{"name":"grp","payload":`+strconv.Itoa(i)+`}`).JobID)
	}
	for i, id := range ids[:8] {
		e.killWith("dial tcp 10.0.0."+strconv.Itoa(i)+":25: connection refused", id)
	}
	e.killWith(`user "u1" not found`, ids[8:]...)

	var dlq wire.DLQResponse
	status, b := e.do("GET", "/dlq?limit=100", "")
	e.must(http.StatusOK, &dlq, status, b)
	fp := ""
	for _, d := range dlq.Jobs {
		if d.JobID == ids[0] {
			fp = d.Fingerprint
		}
	}
	if fp != "dial tcp <ip>: connection refused" {
		t.Fatalf("GET /dlq gives fingerprint %q", fp)
	}
	req := func(extra string) string {
		q, _ := json.Marshal(fp)
		return `{"action":"requeue","name":"grp","fingerprint":` + string(q) + extra + `}`
	}
	for body, want := range map[string]string{
		req(``): "background",
		`{"action":"requeue","fingerprint":"x","background":true}`:                    "fingerprint: goes with name",
		`{"action":"cancel","name":"grp","fingerprint":"x","background":true}`:        "only dead (failed) jobs",
		`{"action":"requeue","name":"grp","fingerprint":"a\u0001","background":true}`: "control characters",
	} {
		if status, b := e.do("POST", "/jobs/bulk", body); status != http.StatusBadRequest || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %s, want 400 %q", body, status, b, want)
		}
	}
	var dry wire.BulkResponse
	status, b = e.do("POST", "/jobs/bulk", req(`,"dry_run":true`))
	e.must(http.StatusOK, &dry, status, b)
	if dry.Matched != 8 {
		t.Errorf("dry run of the group: %+v", dry)
	}
	var started wire.BulkResponse
	status, b = e.do("POST", "/jobs/bulk", req(`,"background":true`))
	e.must(http.StatusAccepted, &started, status, b)
	var op wire.Operation
	testwait.For(t, 5*time.Second, "the operation to end", func() bool {
		op = e.operation(started.OperationID)
		return op.State != wire.OperationRunning
	})
	if op.State != wire.OperationDone || op.Affected != 8 || op.Fingerprint != fp || op.Name != "grp" {
		t.Errorf("operation %+v", op)
	}
	var group []int64
	for _, id := range ids[:8] {
		n, _ := strconv.ParseInt(id, 10, 64)
		group = append(group, n)
	}
	if n := e.count(`SELECT count(*) FROM jobs WHERE status = 'pending' AND id = ANY($1)`, group); n != 8 {
		t.Errorf("%d of the group requeued, want 8", n)
	}
	if n := e.count(`SELECT count(*) FROM jobs WHERE status = 'failed'`); n != 4 {
		t.Errorf("%d jobs still dead, want the other group's 4", n)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'job.bulk' AND details->>'fingerprint' = $1`, fp); n != 1 {
		t.Errorf("the bulk's audit row does not name the fingerprint")
	}
}
