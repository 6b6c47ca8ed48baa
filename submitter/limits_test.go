package submitter_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/wire"
)

// TestLimitRoutes: PUT /limits/{key} creates and replaces a limit, GET
// /limits lists them with their jobs running and waiting, DELETE removes
// one (404 after); each change writes one audit row. A submission's
// concurrency_key becomes the job's limit_key; a name limit applies to
// the jobs of that name submitted after it.
func TestLimitRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var l wire.LimitInfo
	status, b := e.do("PUT", "/limits/tenant-1", `{"concurrency":3}`)
	e.must(http.StatusOK, &l, status, b)
	if l.Key != "tenant-1" || l.Concurrency != 3 || l.Rate != 0 {
		t.Fatalf("PUT answered %s", b)
	}
	status, b = e.do("PUT", "/limits/tenant-1", `{"concurrency":2,"rate":10,"period_seconds":60}`)
	e.must(http.StatusOK, &l, status, b)
	if l.Concurrency != 2 || l.Rate != 10 || l.PeriodSeconds != 60 {
		t.Fatalf("second PUT answered %s", b)
	}
	before := e.submit(`{"name":"report"}`)
	status, b = e.do("PUT", "/limits/name:report", `{"rate":5,"period_seconds":1}`)
	e.must(http.StatusOK, &l, status, b)
	status, b = e.do("PUT", "/limits/a%2Fb%20c", `{"concurrency":1}`) // escaped: the key is "a/b c"
	e.must(http.StatusOK, &l, status, b)
	if l.Key != "a/b c" {
		t.Fatalf("escaped key: %s", b)
	}
	keyed := e.submit(`{"name":"x","concurrency_key":"tenant-1"}`)
	after := e.submit(`{"name":"report"}`)
	e.submit(`{"name":"report","concurrency_key":"tenant-1"}`)
	for id, want := range map[string]string{before.JobID: "", keyed.JobID: "tenant-1", after.JobID: "name:report"} {
		if n := e.count(`SELECT count(*) FROM jobs WHERE id::text = $1 AND coalesce(limit_key, '') = $2`, id, want); n != 1 {
			t.Errorf("job %s: limit_key is not %q", id, want)
		}
	}

	var list wire.LimitListResponse
	status, b = e.do("GET", "/limits", "")
	e.must(http.StatusOK, &list, status, b)
	if len(list.Limits) != 3 || list.Limits[0].Key != "a/b c" || list.Limits[1].Key != "name:report" ||
		list.Limits[1].Waiting != 1 || list.Limits[2].Key != "tenant-1" || list.Limits[2].Waiting != 2 {
		t.Fatalf("GET /limits = %s", b)
	}

	if status, b := e.do("DELETE", "/limits/tenant-1", ""); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", status, b)
	}
	if status, b := e.do("DELETE", "/limits/tenant-1", ""); status != http.StatusNotFound || errCode(t, b) != wire.CodeNotFound {
		t.Fatalf("second DELETE: %d %s; want 404 not_found", status, b)
	}
	if n := e.count(`SELECT count(*) FROM limits`); n != 2 {
		t.Fatalf("%d limits left; want 2", n)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE target_type = 'limit' AND details->>'result' = 'ok'`); n != 5 {
		t.Errorf("%d audit rows for limits, want 5 (four PUTs, one DELETE)", n)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'limit.delete' AND target_id = 'tenant-1'`); n != 2 {
		t.Errorf("%d delete rows for tenant-1, want 2 (one ok, one failed)", n)
	}
}

// TestLimitRoutesBadInput: a bad key or body is a 400 invalid_limit (or
// the decoder's code) naming the field, and writes nothing, not even an
// audit row; a bad concurrency_key is a 400 invalid_field and creates no
// job.
func TestLimitRoutesBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	long := strings.Repeat("k", wire.MaxLimitKeyLen+1)
	for _, c := range []struct{ method, path, body, code, msg string }{
		{"PUT", "/limits/k", `{}`, wire.CodeInvalidLimit, "concurrency: set concurrency or rate"},
		{"PUT", "/limits/k", `{"concurrency":0,"rate":0}`, wire.CodeInvalidLimit, "concurrency: set concurrency or rate"},
		{"PUT", "/limits/k", `{"concurrency":-1}`, wire.CodeInvalidLimit, "concurrency: must be between"},
		{"PUT", "/limits/k", `{"concurrency":1000001}`, wire.CodeInvalidLimit, "concurrency: must be between"},
		{"PUT", "/limits/k", `{"rate":5}`, wire.CodeInvalidLimit, "period_seconds: rate and period_seconds go together"},
		{"PUT", "/limits/k", `{"concurrency":1,"period_seconds":5}`, wire.CodeInvalidLimit, "period_seconds: rate and period_seconds"},
		{"PUT", "/limits/k", `{"rate":-2,"period_seconds":5}`, wire.CodeInvalidLimit, "rate: must be between"},
		{"PUT", "/limits/k", `{"rate":10001,"period_seconds":5}`, wire.CodeInvalidLimit, "rate: must be between 0 (no rate limit) and 10000"},
		{"PUT", "/limits/k", `{"rate":2,"period_seconds":86401}`, wire.CodeInvalidLimit, "period_seconds: must be between"},
		{"PUT", "/limits/k", `{"concurrency":1.5}`, wire.CodeInvalidField, "concurrency: must be an integer"},
		{"PUT", "/limits/k", `{"concurrency":1,"paused":true}`, wire.CodeInvalidField, "paused: unknown field"},
		{"PUT", "/limits/k", `[]`, wire.CodeInvalidJSON, "must be a JSON object"},
		{"PUT", "/limits/" + long, `{"concurrency":1}`, wire.CodeInvalidLimit, "key: is 201 characters long"},
		{"PUT", "/limits/a%01b", `{"concurrency":1}`, wire.CodeInvalidLimit, "key: must not contain control characters"},
		{"PUT", "/limits/name:", `{"concurrency":1}`, wire.CodeInvalidLimit, "must be followed by a job name"},
		{"PUT", "/limits/name:" + strings.Repeat("n", 129), `{"concurrency":1}`, wire.CodeInvalidLimit, "key: the job name is 129"},
		{"DELETE", "/limits/" + long, "", wire.CodeInvalidLimit, "key: is 201 characters long"},
	} {
		status, b := e.do(c.method, c.path, c.body)
		if status != http.StatusBadRequest || errCode(t, b) != c.code || !strings.Contains(string(b), c.msg) {
			t.Errorf("%s %s %s: %d %s; want 400 %s %q", c.method, c.path, c.body, status, b, c.code, c.msg)
		}
	}
	for _, c := range []struct{ path, body, msg string }{
		{"/submit_job", `{"name":"x","concurrency_key":"` + long + `"}`, "concurrency_key: is 201 characters long"},
		{"/submit_job", `{"name":"x","concurrency_key":"a\u0007b"}`, "concurrency_key: must not contain control characters"},
		{"/submit_job", `{"name":"x","concurrency_key":7}`, "concurrency_key"},
		{"/submit_jobs", `[{"name":"x"},{"name":"x","concurrency_key":"` + long + `"}]`, "jobs[1].concurrency_key: is 201"},
	} {
		status, b := e.do("POST", c.path, c.body)
		if status != http.StatusBadRequest || errCode(t, b) != wire.CodeInvalidField || !strings.Contains(string(b), c.msg) {
			t.Errorf("POST %s %s: %d %s; want 400 invalid_field %q", c.path, c.body, status, b, c.msg)
		}
	}
	if n := e.count(`SELECT count(*) FROM limits`) + e.count(`SELECT count(*) FROM audit_log`) + e.jobCount(); n != 0 {
		t.Errorf("bad input wrote %d rows", n)
	}
}

// TestLimitRoutesScopes: reading needs read; changing needs admin.
func TestLimitRoutesScopes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	read := bearer(jwtFor(t, "read submit"))
	if status, b := e.do("GET", "/limits", "", read...); status != http.StatusOK {
		t.Fatalf("GET /limits with read: %d %s", status, b)
	}
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/limits/k", `{"concurrency":1}`}, {"DELETE", "/limits/k", ""},
	} {
		if status, b := e.do(c.method, c.path, c.body, read...); status != http.StatusForbidden {
			t.Errorf("%s %s without admin: %d %s; want 403", c.method, c.path, status, b)
		}
	}
	if n := e.count(`SELECT count(*) FROM limits`); n != 0 {
		t.Fatalf("a forbidden change wrote %d rows", n)
	}
	status, b := e.do("PUT", "/limits/k", `{"concurrency":1}`, bearer(jwtFor(t, "admin"))...)
	if status != http.StatusOK {
		t.Fatalf("PUT with admin: %d %s", status, b)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'limit.set' AND actor <> ''`); n != 1 {
		t.Fatalf("%d audit rows with an actor for the PUT; want 1", n)
	}
}
