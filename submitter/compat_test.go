package submitter_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/api"
)

// compatCase is one request to a compatibility route and what it must
// answer: the status, the error code for a 4xx, a text the message must
// hold, and a check of the success answer.
type compatCase struct {
	name    string
	body    string
	headers []string
	status  int
	code    string // error code of a 4xx
	message string // part of the error message
	check   func(t *testing.T, e *env, body []byte)
}

// runCompat sends each case to method path on e, in parallel, and returns
// once all have been checked.
func runCompat(t *testing.T, e *env, method, path string, cases []compatCase) {
	t.Helper()
	t.Run(method+" "+path, func(t *testing.T) { runCases(t, e, method, path, cases) })
}

func runCases(t *testing.T, e *env, method, path string, cases []compatCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := *e
			e.t = t
			status, body := e.do(method, path, c.body, c.headers...)
			if status != c.status {
				t.Fatalf("%s %s %s = %d, want %d: %s", method, path, c.body, status, c.status, body)
			}
			if c.code != "" {
				if got := errCode(t, body); got != c.code {
					t.Errorf("code %q, want %q: %s", got, c.code, body)
				}
				if !strings.Contains(string(body), c.message) {
					t.Errorf("message lacks %q: %s", c.message, body)
				}
			}
			if c.check != nil {
				c.check(t, &e, body)
			}
		})
	}
}

func decodeAs[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return v
}

// TestCompatHealth: GET /health answers as /healthz does, without a token
// even with auth on.
func TestCompatHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	status, body := e.do("GET", "/health", "")
	if status != 200 || strings.TrimSpace(string(body)) != `{"status":"ok"}` {
		t.Errorf("GET /health = %d %s, want 200 {\"status\":\"ok\"}", status, body)
	}
	if status, _ := e.do("POST", "/health", ""); status != http.StatusMethodNotAllowed {
		t.Errorf("POST /health = %d, want 405", status)
	}
}

func TestCompatPostJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	at := time.Date(2031, 6, 1, 10, 0, 0, 5e8, time.UTC)
	job := func(check func(t *testing.T, j wire.Job)) func(t *testing.T, e *env, body []byte) {
		return func(t *testing.T, e *env, body []byte) {
			r := decodeAs[wire.SubmitResponse](t, body)
			if r.Status != "pending" || r.JobID == "" {
				t.Errorf("answer %s, want the /submit_job shape", body)
			}
			check(t, e.getJob(r.JobID))
		}
	}
	runCompat(t, e, "POST", "/jobs", []compatCase{
		{name: "scheduled_at", body: `{"type":"report","scheduled_at":"2031-06-01T12:00:00.5+02:00"}`, status: 201,
			check: job(func(t *testing.T, j wire.Job) {
				if j.NextRunAt == nil || !j.NextRunAt.Equal(at) || j.Name != "report" {
					t.Errorf("next_run_at %v name %q, want %v report", j.NextRunAt, j.Name, at)
				}
			})},
		{name: "max_attempts", body: `{"type":"a","max_attempts":5}`, status: 201,
			check: job(func(t *testing.T, j wire.Job) {
				if j.MaxRetries != 4 {
					t.Errorf("max_retries %d, want 4", j.MaxRetries)
				}
			})},
		{name: "max_attempts 1: no retry", body: `{"type":"a","max_attempts":1}`, status: 201,
			check: job(func(t *testing.T, j wire.Job) {
				if j.MaxRetries != 0 {
					t.Errorf("max_retries %d, want 0", j.MaxRetries)
				}
			})},
		{name: "max_attempts at its limit", body: `{"type":"a","max_attempts":101}`, status: 201,
			check: job(func(t *testing.T, j wire.Job) {
				if j.MaxRetries != 100 {
					t.Errorf("max_retries %d, want 100", j.MaxRetries)
				}
			})},
		{name: "max_attempts agreeing with max_retries", body: `{"type":"a","max_attempts":3,"max_retries":2}`, status: 201,
			check: job(func(t *testing.T, j wire.Job) {
				if j.MaxRetries != 2 {
					t.Errorf("max_retries %d, want 2", j.MaxRetries)
				}
			})},
		{name: "native fields still", body: `{"name":"a","run_at":"2031-06-01T10:00:00.5Z","max_retries":7,"priority":3}`, status: 201,
			check: job(func(t *testing.T, j wire.Job) {
				if !j.NextRunAt.Equal(at) || j.MaxRetries != 7 || j.Priority != 3 {
					t.Errorf("job %+v", j)
				}
			})},
		{name: "scheduled_at with run_at", body: `{"type":"a","scheduled_at":"2031-06-01T10:00:00Z","run_at":"2031-06-01T10:00:00Z"}`,
			status: 400, code: wire.CodeInvalidField, message: "scheduled_at: give one of scheduled_at, run_at and delay_seconds"},
		{name: "scheduled_at with delay_seconds", body: `{"type":"a","scheduled_at":"2031-06-01T10:00:00Z","delay_seconds":5}`,
			status: 400, code: wire.CodeInvalidField, message: "scheduled_at: give one of"},
		{name: "scheduled_at not a time", body: `{"type":"a","scheduled_at":"tomorrow"}`,
			status: 400, code: wire.CodeInvalidField, message: "scheduled_at: must be an RFC 3339 time"},
		{name: "scheduled_at a number", body: `{"type":"a","scheduled_at":1700000000}`,
			status: 400, code: wire.CodeInvalidField, message: "scheduled_at: must be a string"},
		{name: "max_attempts 0", body: `{"type":"a","max_attempts":0}`,
			status: 400, code: wire.CodeInvalidField, message: "max_attempts: must be between 1 and 101"},
		{name: "max_attempts too many", body: `{"type":"a","max_attempts":102}`,
			status: 400, code: wire.CodeInvalidField, message: "max_attempts: must be between 1 and 101"},
		{name: "max_attempts a string", body: `{"type":"a","max_attempts":"3"}`,
			status: 400, code: wire.CodeInvalidField, message: "max_attempts: must be an integer"},
		{name: "max_attempts disagreeing with max_retries", body: `{"type":"a","max_attempts":3,"max_retries":3}`,
			status: 400, code: wire.CodeInvalidField, message: "max_attempts: must be max_retries + 1 (4)"},
		{name: "native field of a wrong type", body: `{"type":"a","priority":"high"}`,
			status: 400, code: wire.CodeInvalidField, message: "priority: must be an integer"},
		{name: "native rule", body: `{"type":"a","max_retries":101}`,
			status: 400, code: wire.CodeInvalidField, message: "max_retries: must be between 0 and 100"},
		{name: "unknown field", body: `{"type":"a","attempts":3}`,
			status: 400, code: wire.CodeInvalidField, message: "attempts: unknown field"},
		{name: "no type", body: `{"scheduled_at":"2031-06-01T10:00:00Z"}`,
			status: 400, code: wire.CodeInvalidField, message: "name: required"},
		{name: "not an object", body: `[]`, status: 400, code: wire.CodeInvalidJSON, message: "must be a JSON object"},
	})
	if n := e.jobCount(); n != 6 {
		t.Errorf("%d jobs, want 6 (one per accepted request)", n)
	}
}

func TestCompatTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	created := func(t *testing.T, e *env, body []byte) {
		r := decodeAs[api.TaskCreated](t, body)
		if r.Status != "PENDING" || !strings.HasPrefix(string(body), `{"task_id":"`) {
			t.Errorf("answer %s, want {\"task_id\":\"<id>\",\"status\":\"PENDING\"}", body)
		}
		if j := e.getJob(r.TaskID); j.Name != "resize" || string(j.Payload) != `{"w": 10}` && string(j.Payload) != `{"w":10}` {
			t.Errorf("job %s: name %q payload %s", r.TaskID, j.Name, j.Payload)
		}
	}
	runCompat(t, e, "POST", "/api/tasks", []compatCase{
		{name: "type and payload", body: `{"type":"resize","payload":{"w":10}}`, status: 202, check: created},
		{name: "name for type", body: `{"name":"resize","payload":{"w":10}}`, status: 202, check: created},
		{name: "native options", body: `{"type":"resize","payload":{"w":10},"priority":5,"delay_seconds":60}`, status: 202, check: created},
		{name: "no type", body: `{"payload":{"w":10}}`, status: 400, code: wire.CodeInvalidField, message: "type: required"},
		{name: "type and name differ", body: `{"type":"a","name":"b"}`, status: 400, code: wire.CodeInvalidField, message: "type: differs from name"},
		{name: "type not a string", body: `{"type":7}`, status: 400, code: wire.CodeInvalidField, message: "type: must be a string"},
		{name: "unknown field", body: `{"type":"a","retry_count":0}`, status: 400, code: wire.CodeInvalidField, message: "retry_count: unknown field"},
		{name: "empty body", body: ``, status: 400, code: wire.CodeInvalidJSON, message: "empty"},
		{name: "bad idempotency header", body: `{"type":"a"}`, headers: []string{"Idempotency-Key", strings.Repeat("k", 201)},
			status: 400, code: wire.CodeInvalidField, message: "Idempotency-Key header"},
	})
	if n := e.jobCount(); n != 3 {
		t.Errorf("%d jobs, want 3 (one per accepted request)", n)
	}
}

// An idempotent repeat of POST /api/tasks is 202 with the first task.
func TestCompatTaskIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	post := func() api.TaskCreated {
		status, body := e.do("POST", "/api/tasks", `{"type":"a"}`, "Idempotency-Key", "k1")
		var r api.TaskCreated
		e.must(http.StatusAccepted, &r, status, body)
		return r
	}
	first := post()
	e.exec(`UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = $1`, first.TaskID)
	if again := post(); again.TaskID != first.TaskID || again.Status != "SUCCESS" {
		t.Errorf("repeat = %+v, want task %s SUCCESS", again, first.TaskID)
	}
}

func TestCompatGetTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		name, set, status, jobStatus string
		retries                      int
		errText                      string
	}{
		{"pending", `status = 'pending'`, "PENDING", "pending", 0, ""},
		{"leased", `status = 'leased', lease_token = 1, worker_id = 'w1', attempts = 1, started_at = now()`, "PROCESSING", "leased", 0, ""},
		{"retrying", `status = 'retrying', attempts = 1, last_error = 'boom',
			errors = '[{"attempt":1,"error":"boom","reason":"error","at":"2030-01-01T00:00:00Z"}]'`, "PENDING", "retrying", 1, "boom"},
		{"completed", `status = 'completed', attempts = 1, result = '{"ok":true}', finished_at = now()`, "SUCCESS", "completed", 0, ""},
		{"failed", `status = 'failed', attempts = 2, last_error = 'again', dead_reason = 'max_retries_exceeded', finished_at = now(),
			errors = '[{"attempt":1,"error":"boom","reason":"error","at":"2030-01-01T00:00:00Z"},{"attempt":2,"error":"again","reason":"error","at":"2030-01-01T00:01:00Z"}]'`,
			"FAILED", "failed", 2, "again"},
		{"canceled", `status = 'canceled', finished_at = now()`, "FAILED", "canceled", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := *e
			e.t = t
			status, body := e.do("POST", "/api/tasks", `{"type":"resize","payload":[1,2]}`)
			var c api.TaskCreated
			e.must(http.StatusAccepted, &c, status, body)
			e.exec(`UPDATE jobs SET `+tt.set+` WHERE id = $1`, c.TaskID)

			status, body = e.do("GET", "/api/tasks/"+c.TaskID, "")
			var task api.Task
			e.must(http.StatusOK, &task, status, body)
			if task.TaskID != c.TaskID || task.Type != "resize" || task.Status != tt.status || task.JobStatus != tt.jobStatus ||
				task.RetryCount != tt.retries || strings.ReplaceAll(string(task.Payload), " ", "") != "[1,2]" {
				t.Errorf("task = %s, want status %s job_status %s retry_count %d", body, tt.status, tt.jobStatus, tt.retries)
			}
			if got := ""; task.Error != nil {
				if got = *task.Error; got != tt.errText {
					t.Errorf("error %q, want %q", got, tt.errText)
				}
			} else if tt.errText != "" {
				t.Errorf("error null, want %q", tt.errText)
			}
			if tt.name == "completed" && strings.ReplaceAll(string(task.Result), " ", "") != `{"ok":true}` {
				t.Errorf("result %s", task.Result)
			}
		})
	}
	runCompat(t, e, "GET", "/api/tasks/0", []compatCase{{name: "id zero", status: 400, code: wire.CodeInvalidID, message: "positive integer"}})
	runCompat(t, e, "GET", "/api/tasks/abc", []compatCase{{name: "id not a number", status: 400, code: wire.CodeInvalidID, message: "positive integer"}})
	runCompat(t, e, "GET", "/api/tasks/999999", []compatCase{{name: "unknown id", status: 404, code: wire.CodeNotFound}})
}

func TestCompatAddJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	added := func(t *testing.T, e *env, body []byte) {
		r := decodeAs[api.JobAdded](t, body)
		if r.Message != "Job added to queue" || r.Status != "pending" || r.JobID == "" {
			t.Errorf("answer %s, want the original's message with the job's id", body)
		}
		if j := e.getJob(r.JobID); j.Name != "welcome_email" {
			t.Errorf("job %s: name %q", r.JobID, j.Name)
		}
	}
	runCompat(t, e, "POST", "/addJob", []compatCase{
		{name: "submit_job body", body: `{"name":"welcome_email","payload":{"email":"a@example.com","name":"Ann"}}`, status: 200, check: added},
		{name: "with options", body: `{"name":"welcome_email","max_retries":0,"queue":"mail"}`, status: 200, check: added},
		{name: "idempotency header", body: `{"name":"welcome_email"}`, headers: []string{"Idempotency-Key", "signup-7"}, status: 200, check: added},
		{name: "the original's own body", body: `{"email":"a@example.com","name":"Ann"}`,
			status: 400, code: wire.CodeInvalidField, message: "email: unknown field"},
		{name: "no name", body: `{"payload":1}`, status: 400, code: wire.CodeInvalidField, message: "name: required"},
		{name: "name too long", body: `{"name":"` + strings.Repeat("n", 129) + `"}`, status: 400, code: wire.CodeInvalidField, message: "name: is 129 characters"},
		{name: "payload of a wrong shape", body: `{"name":"a","payload":"\u0000"}`, status: 400, code: wire.CodeInvalidField, message: "payload:"},
		{name: "not JSON", body: `name=a`, status: 400, code: wire.CodeInvalidJSON, message: "invalid JSON"},
	})
	if n := e.jobCount(); n != 3 {
		t.Errorf("%d jobs, want 3 (one per accepted request)", n)
	}
}

// TestCompatFailedJobs pages through 7 dead jobs 3 at a time: pages 1-3
// hold them all, in the DLQ's order, and page 4 is empty.
func TestCompatFailedJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var want []string
	for range 7 {
		want = append(want, e.submit(`{"name":"dead"}`).JobID)
	}
	e.submit(`{"name":"alive"}`)
	// Failed at three moments: jobs 0-2 first, 3-4 next, 5-6 last (ties).
	e.exec(`UPDATE jobs SET status = 'failed', dead_reason = 'permanent', attempts = 1, last_error = 'bad input',
		finished_at = timestamptz '2030-01-01 00:00:00.000001Z' + (CASE WHEN id <= $1 THEN 0 WHEN id <= $2 THEN 1 ELSE 2 END) * interval '1 second'
		WHERE name = 'dead'`, want[2], want[4])
	slices.Reverse(want) // most recently failed first; within a moment, newest id first

	get := func(query string) ([]api.FailedJob, string) {
		t.Helper()
		resp, err := e.http.Client().Get(e.http.URL + "/failedJobs" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "[") {
			t.Fatalf("GET /failedJobs%s = %d %s, want 200 and a bare array", query, resp.StatusCode, body)
		}
		return decodeAs[[]api.FailedJob](t, body), resp.Header.Get("Link")
	}
	var got []string
	for page, wantLen := range []int{3, 3, 1, 0} {
		jobs, link := get(fmt.Sprintf("?page=%d&limit=3", page+1))
		if len(jobs) != wantLen {
			t.Errorf("page %d: %d jobs, want %d", page+1, len(jobs), wantLen)
		}
		wantLink := ""
		if page < 2 {
			wantLink = fmt.Sprintf(`</failedJobs?limit=3&page=%d>; rel="next"`, page+2)
		}
		if link != wantLink {
			t.Errorf("page %d: Link %q, want %q", page+1, link, wantLink)
		}
		for _, j := range jobs {
			got = append(got, j.JobID)
			if j.Name != "dead" || j.Error != "bad input" || j.Reason != "permanent" || j.Attempts != 1 || j.FailedAt == nil {
				t.Errorf("entry %+v", j)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages of 3 = %v, want %v", got, want)
	}
	if jobs, link := get(""); len(jobs) != 7 || link != "" {
		t.Errorf("defaults (page 1, limit 50): %d jobs, Link %q", len(jobs), link)
	}
	if jobs, _ := get("?limit=2&page=2"); len(jobs) != 2 || jobs[0].JobID != want[2] {
		t.Errorf("page 2 of 2: %+v, want from %s", jobs, want[2])
	}

	runCompat(t, e, "GET", "/failedJobs?page=0", []compatCase{{name: "page 0", status: 400, code: wire.CodeInvalidField, message: "page: must be an integer of at least 1"}})
	runCompat(t, e, "GET", "/failedJobs?page=x", []compatCase{{name: "page not a number", status: 400, code: wire.CodeInvalidField, message: "page:"}})
	runCompat(t, e, "GET", "/failedJobs?limit=0", []compatCase{{name: "limit 0", status: 400, code: wire.CodeInvalidField, message: "limit: must be an integer between 1 and 1000"}})
	runCompat(t, e, "GET", "/failedJobs?limit=1001", []compatCase{{name: "limit too big", status: 400, code: wire.CodeInvalidField, message: "limit:"}})
	runCompat(t, e, "GET", "/failedJobs?limit=1000&page=12", []compatCase{{name: "too deep", status: 400, code: wire.CodeInvalidField, message: "GET /dlq"}})
	runCompat(t, e, "GET", "/failedJobs?limit=1000&page=11", []compatCase{{name: "deepest page", status: 200}})
	runCompat(t, e, "GET", "/failedJobs?page=9223372036854775807", []compatCase{{name: "huge page", status: 400, code: wire.CodeInvalidField, message: "page:"}})
}

// A page of /failedJobs holds limit entries even when the DLQ's byte bound
// splits the reads behind it: page 2 starts where page 1 ended.
func TestCompatFailedJobsBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n, payload = 12, 1 << 20
	e.exec(`INSERT INTO jobs (name, payload, status, finished_at, dead_reason)
		SELECT 'big', to_jsonb(repeat('x', $1)), 'failed', now() - g * interval '1 second', 'permanent' FROM generate_series(1, $2) g`, payload, n)
	var ids []string
	for page, wantLen := range []int{10, 2} {
		status, body := e.do("GET", fmt.Sprintf("/failedJobs?limit=10&page=%d", page+1), "")
		var jobs []api.FailedJob
		e.must(200, &jobs, status, body)
		if len(jobs) != wantLen || len(body) > 64<<10 {
			t.Errorf("page %d: %d jobs in %d bytes, want %d without payloads", page+1, len(jobs), len(body), wantLen)
		}
		for _, j := range jobs {
			ids = append(ids, j.JobID)
		}
	}
	if want := e.count(`SELECT count(DISTINCT id) FROM jobs`); len(ids) != want || len(slices.Compact(slices.Sorted(slices.Values(ids)))) != want {
		t.Errorf("ids over both pages %v, want each of the %d once", ids, want)
	}
}

// TestCompatScopes: with auth on, each compatibility route needs the scope
// of its native twin.
func TestCompatScopes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	submitKey, _ := e.apiKey("submit", "submit")
	readKey, _ := e.apiKey("read", "read")
	id := newJobID(e)
	for _, rt := range []struct {
		method, path, body string
		scope              string
		ok                 int
	}{
		{"POST", "/jobs", `{"type":"a","max_attempts":2,"scheduled_at":"2030-01-01T00:00:00Z"}`, "submit", 201},
		{"POST", "/api/tasks", `{"type":"a"}`, "submit", 202},
		{"POST", "/addJob", `{"name":"a"}`, "submit", 200},
		{"GET", "/api/tasks/" + id, "", "read", 200},
		{"GET", "/failedJobs?page=1&limit=5", "", "read", 200},
	} {
		right, wrong := submitKey, readKey
		if rt.scope == "read" {
			right, wrong = readKey, submitKey
		}
		for _, c := range []struct {
			name    string
			headers []string
			status  int
			code    string
		}{
			{"no token", nil, 401, wire.CodeUnauthorized},
			{"wrong scope", bearer(wrong), 403, wire.CodeForbidden},
			{"right scope", bearer(right), rt.ok, ""},
			{"jwt", bearer(jwtFor(t, rt.scope)), rt.ok, ""},
		} {
			status, body := e.do(rt.method, rt.path, rt.body, c.headers...)
			if status != c.status || c.code != "" && errCode(t, body) != c.code {
				t.Errorf("%s %s, %s: %d %s, want %d %s", rt.method, rt.path, c.name, status, body, c.status, c.code)
			}
		}
	}
	if n := e.jobCount(); n != 1+3*2 {
		t.Errorf("%d jobs, want 7 (the fixture and two per submit route)", n)
	}
}
