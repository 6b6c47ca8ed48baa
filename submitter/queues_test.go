package submitter_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/wire"
)

// TestQueueRoutes: GET /queues counts each queue and shows its settings;
// pause, resume and a cap change the queues table, answer the queue's
// settings, and each writes one audit row with the actor.
func TestQueueRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for range 3 {
		e.submit(`{"name":"r","queue":"reports"}`)
	}
	e.submit(`{"name":"d"}`)
	e.submit(`{"name":"d","delay_seconds":3600}`)

	var q wire.QueueInfo
	status, b := e.do("POST", "/queues/reports/pause", "")
	e.must(http.StatusOK, &q, status, b)
	if q.Name != "reports" || !q.Paused || q.Concurrency != 0 {
		t.Fatalf("pause answered %s", b)
	}
	status, b = e.do("PUT", "/queues/reports", `{"concurrency":4}`)
	e.must(http.StatusOK, &q, status, b)
	if !q.Paused || q.Concurrency != 4 {
		t.Fatalf("cap answered %s", b)
	}
	status, b = e.do("POST", "/queues/idle", `{"concurrency":2}`)
	e.must(http.StatusOK, &q, status, b)

	var list wire.QueueListResponse
	status, b = e.do("GET", "/queues", "")
	e.must(http.StatusOK, &list, status, b)
	byName := map[string]wire.QueueInfo{}
	for _, q := range list.Queues {
		byName[q.Name] = q
	}
	if r := byName["reports"]; len(list.Queues) != 3 || r.Depth != 3 || r.Pending != 3 || !r.Paused || r.Concurrency != 4 {
		t.Fatalf("GET /queues = %s", b)
	}
	if d := byName["default"]; d.Depth != 1 || d.Pending != 2 || d.Paused || d.Running != 0 {
		t.Fatalf("default = %+v", d)
	}
	if i := byName["idle"]; i.Concurrency != 2 || i.Depth != 0 {
		t.Fatalf("idle = %+v", i)
	}

	status, b = e.do("POST", "/queues/reports/resume", "")
	e.must(http.StatusOK, &q, status, b)
	if q.Paused || q.Concurrency != 4 {
		t.Fatalf("resume answered %s", b)
	}
	var paused bool
	var cap int
	if err := e.db.QueryRow(t.Context(), `SELECT paused, concurrency FROM queues WHERE name = 'reports'`).Scan(&paused, &cap); err != nil {
		t.Fatal(err)
	}
	if paused || cap != 4 {
		t.Fatalf("row: paused %v, concurrency %d", paused, cap)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE target_type = 'queue' AND details->>'result' = 'ok'`); n != 4 {
		t.Errorf("%d audit rows for queues, want 4 (pause, two caps, resume)", n)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE target_type = 'queue' AND target_id = 'reports' AND action = 'queue.pause'`); n != 1 {
		t.Errorf("%d pause rows for reports, want 1", n)
	}
}

// TestQueueRoutesBadInput: a bad name or body is a 400 naming the field
// and writes nothing, not even an audit row.
func TestQueueRoutesBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	long := strings.Repeat("q", wire.MaxQueueNameLen+1)
	for _, c := range []struct{ method, path, body, code, msg string }{
		{"POST", "/queues/bad%20name/pause", "", wire.CodeInvalidField, "name:"},
		{"POST", "/queues/" + long + "/resume", "", wire.CodeInvalidField, "name:"},
		{"PUT", "/queues/q", `{}`, wire.CodeInvalidField, "concurrency: required"},
		{"PUT", "/queues/q", `{"concurrency":-1}`, wire.CodeInvalidField, "concurrency: must be between"},
		{"PUT", "/queues/q", `{"concurrency":1000001}`, wire.CodeInvalidField, "concurrency: must be between"},
		{"PUT", "/queues/q", `{"concurrency":1.5}`, wire.CodeInvalidField, "concurrency: must be an integer"},
		{"PUT", "/queues/q", `{"concurrency":1,"paused":true}`, wire.CodeInvalidField, "paused: unknown field"},
		{"PUT", "/queues/q", `[]`, wire.CodeInvalidJSON, "must be a JSON object"},
		{"PUT", "/queues/" + long, `{"concurrency":1}`, wire.CodeInvalidField, "name:"},
	} {
		status, b := e.do(c.method, c.path, c.body)
		if status != http.StatusBadRequest || errCode(t, b) != c.code || !strings.Contains(string(b), c.msg) {
			t.Errorf("%s %s %s: %d %s; want 400 %s %q", c.method, c.path, c.body, status, b, c.code, c.msg)
		}
	}
	if n := e.count(`SELECT count(*) FROM queues`) + e.count(`SELECT count(*) FROM audit_log`); n != 0 {
		t.Errorf("bad input wrote %d rows", n)
	}
}

// TestQueueRoutesScopes: reading needs read; changing needs admin.
func TestQueueRoutesScopes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	read := bearer(jwtFor(t, "read submit"))
	if status, b := e.do("GET", "/queues", "", read...); status != http.StatusOK {
		t.Fatalf("GET /queues with read: %d %s", status, b)
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/queues/q/pause", ""}, {"POST", "/queues/q/resume", ""}, {"PUT", "/queues/q", `{"concurrency":1}`},
		{"POST", "/queues/q", `{"concurrency":1}`},
	} {
		if status, b := e.do(c.method, c.path, c.body, read...); status != http.StatusForbidden {
			t.Errorf("%s %s without admin: %d %s; want 403", c.method, c.path, status, b)
		}
	}
	if n := e.count(`SELECT count(*) FROM queues`); n != 0 {
		t.Fatalf("a forbidden change wrote %d rows", n)
	}
	status, b := e.do("POST", "/queues/q/pause", "", bearer(jwtFor(t, "admin"))...)
	if status != http.StatusOK {
		t.Fatalf("pause with admin: %d %s", status, b)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'queue.pause' AND actor <> ''`); n != 1 {
		t.Fatalf("%d audit rows with an actor for the pause; want 1", n)
	}
}
