package submitter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter"
)

// TestBadInput sends bad requests to every route and checks the status, the
// error code, the message and that no job was written or changed.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pending := e.submit(`{"name":"seed"}`)
	completed := e.submit(`{"name":"seed"}`)
	e.exec(`UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = $1`, completed.JobID)
	const seeded = 2
	snapshot := func() string {
		var s string
		if err := e.db.QueryRow(context.Background(), `SELECT coalesce(string_agg(id || ':' || status || ':' || cancel_requested, ',' ORDER BY id), '')
			FROM jobs`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snapshot()

	job := func(fields string) string { return `{"name":"email"` + fields + `}` }
	items := func(n int, bad int, badItem string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(`{"name":"j%d"}`, i)
		}
		if bad >= 0 {
			parts[bad] = badItem
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	big := func(n int) string { return strings.Repeat("x", n) }

	type tc struct {
		name    string
		method  string
		path    string
		body    string
		headers []string
		local   bool // send to the handler directly (bodies over the limit)
		status  int
		code    string
		msg     string // the message contains this
	}
	tests := []tc{
		// Malformed bodies.
		{"empty body", "POST", "/submit_job", "", nil, false, 400, wire.CodeInvalidJSON, "empty"},
		{"truncated", "POST", "/submit_job", `{"name":`, nil, false, 400, wire.CodeInvalidJSON, "truncated"},
		{"syntax error", "POST", "/submit_job", `{"name" "x"}`, nil, false, 400, wire.CodeInvalidJSON, "byte offset"},
		{"form encoded", "POST", "/submit_job", `name=x&payload=y`, []string{"Content-Type", "application/x-www-form-urlencoded"}, false, 400, wire.CodeInvalidJSON, ""},
		{"trailing garbage", "POST", "/submit_job", job(``) + ` xyz`, nil, false, 400, wire.CodeInvalidJSON, "after the JSON value"},
		{"two objects", "POST", "/submit_job", job(``) + job(``), nil, false, 400, wire.CodeInvalidJSON, "after the JSON value"},
		{"array body", "POST", "/submit_job", `[` + job(``) + `]`, nil, false, 400, wire.CodeInvalidJSON, "object"},
		{"null body", "POST", "/submit_job", `null`, nil, false, 400, wire.CodeInvalidJSON, "object"},
		{"string body", "POST", "/submit_job", `"email"`, nil, false, 400, wire.CodeInvalidJSON, "object"},
		{"body over limit", "POST", "/submit_job", job(`,"payload":"` + big(submitter.DefaultMaxBodyBytes) + `"`), nil, true, 413, wire.CodeBodyTooLarge, ""},
		{"unknown field", "POST", "/submit_job", job(`,"colour":"red"`), nil, false, 400, wire.CodeInvalidField, "colour: unknown field"},

		// name
		{"name missing", "POST", "/submit_job", `{"payload":1}`, nil, false, 400, wire.CodeInvalidField, "name: required"},
		{"name empty", "POST", "/submit_job", `{"name":""}`, nil, false, 400, wire.CodeInvalidField, "name: required"},
		{"name number", "POST", "/submit_job", `{"name":5}`, nil, false, 400, wire.CodeInvalidField, "name: must be a string"},
		{"name null object", "POST", "/submit_job", `{"name":{}}`, nil, false, 400, wire.CodeInvalidField, "name"},
		{"name too long", "POST", "/submit_job", `{"name":"` + big(129) + `"}`, nil, false, 400, wire.CodeInvalidField, "name: is 129 characters"},
		{"name too long multibyte", "POST", "/submit_job", `{"name":"` + strings.Repeat("é", 129) + `"}`, nil, false, 400, wire.CodeInvalidField, "name"},
		{"name newline", "POST", "/submit_job", `{"name":"a\nb"}`, nil, false, 400, wire.CodeInvalidField, "name: must not contain control"},
		{"name NUL", "POST", "/submit_job", `{"name":"a\u0000b"}`, nil, false, 400, wire.CodeInvalidField, "name"},
		{"name DEL", "POST", "/submit_job", `{"name":"a\u007f"}`, nil, false, 400, wire.CodeInvalidField, "name"},
		{"name C1 control", "POST", "/submit_job", `{"name":"a\u0085"}`, nil, false, 400, wire.CodeInvalidField, "name"},
		{"type differs from name", "POST", "/jobs", `{"name":"a","type":"b"}`, nil, false, 400, wire.CodeInvalidField, "type: differs from name"},
		{"type too long", "POST", "/jobs", `{"type":"` + big(200) + `"}`, nil, false, 400, wire.CodeInvalidField, "name"},

		// payload
		{"payload over limit", "POST", "/submit_job", job(`,"payload":"` + big(submitter.DefaultMaxPayloadBytes) + `"`), nil, false, 400, wire.CodeInvalidField, "payload: is 1048578 bytes"},
		{"payload numbers expand over limit", "POST", "/submit_job", job(`,"payload":[` + strings.TrimSuffix(strings.Repeat("1e9999,", 200), ",") + `]`), nil, false, 400, wire.CodeInvalidField, "payload: is"},
		{"payload NUL escape", "POST", "/submit_job", job(`,"payload":{"a":"x\u0000y"}`), nil, false, 400, wire.CodeInvalidField, `payload: must not contain \u0000`},
		{"payload NUL in key", "POST", "/submit_job", job(`,"payload":{"\u0000":1}`), nil, false, 400, wire.CodeInvalidField, "payload"},
		{"payload lone high surrogate", "POST", "/submit_job", job(`,"payload":"\ud800"`), nil, false, 400, wire.CodeInvalidField, "payload: must not contain an unpaired"},
		{"payload lone low surrogate", "POST", "/submit_job", job(`,"payload":"\udc00x"`), nil, false, 400, wire.CodeInvalidField, "payload"},
		{"payload invalid UTF-8", "POST", "/submit_job", job(`,"payload":"` + "\xff\xfe" + `"`), nil, false, 400, wire.CodeInvalidField, "payload: must be valid UTF-8"},
		{"payload number too big", "POST", "/submit_job", job(`,"payload":1e200000`), nil, false, 400, wire.CodeInvalidField, "payload: holds a number out of range"},
		{"payload number too small", "POST", "/submit_job", job(`,"payload":1e-20000`), nil, false, 400, wire.CodeInvalidField, "payload: holds a number out of range"},
		{"payload too deep", "POST", "/submit_job", job(`,"payload":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001)), nil, false, 400, wire.CodeInvalidField, "payload: is nested deeper"},
		{"payload invalid JSON", "POST", "/submit_job", job(`,"payload":{"a":}`), nil, false, 400, wire.CodeInvalidJSON, ""},

		// numbers
		{"priority too high", "POST", "/submit_job", job(`,"priority":1001`), nil, false, 400, wire.CodeInvalidField, "priority: must be between -1000 and 1000"},
		{"priority too low", "POST", "/submit_job", job(`,"priority":-1001`), nil, false, 400, wire.CodeInvalidField, "priority"},
		{"priority absurd", "POST", "/submit_job", job(`,"priority":1e30`), nil, false, 400, wire.CodeInvalidField, "priority"},
		{"priority overflow int64", "POST", "/submit_job", job(`,"priority":99999999999999999999`), nil, false, 400, wire.CodeInvalidField, "priority"},
		{"priority fraction", "POST", "/submit_job", job(`,"priority":1.5`), nil, false, 400, wire.CodeInvalidField, "priority: must be an integer"},
		{"priority string", "POST", "/submit_job", job(`,"priority":"high"`), nil, false, 400, wire.CodeInvalidField, "priority: must be an integer"},
		{"max_retries negative", "POST", "/submit_job", job(`,"max_retries":-1`), nil, false, 400, wire.CodeInvalidField, "max_retries"},
		{"max_retries too high", "POST", "/submit_job", job(`,"max_retries":101`), nil, false, 400, wire.CodeInvalidField, "max_retries: must be between 0 and 100"},
		{"max_retries bool", "POST", "/submit_job", job(`,"max_retries":true`), nil, false, 400, wire.CodeInvalidField, "max_retries"},
		{"timeout negative", "POST", "/submit_job", job(`,"timeout_seconds":-1`), nil, false, 400, wire.CodeInvalidField, "timeout_seconds"},
		{"timeout too long", "POST", "/submit_job", job(`,"timeout_seconds":86401`), nil, false, 400, wire.CodeInvalidField, "timeout_seconds"},
		{"delay negative", "POST", "/submit_job", job(`,"delay_seconds":-1`), nil, false, 400, wire.CodeInvalidField, "delay_seconds"},
		{"delay too long", "POST", "/submit_job", job(`,"delay_seconds":31536001`), nil, false, 400, wire.CodeInvalidField, "delay_seconds: must be between 0 and 31536000"},

		// run_at
		{"run_at not a time", "POST", "/submit_job", job(`,"run_at":"tomorrow"`), nil, false, 400, wire.CodeInvalidField, "run_at: must be an RFC 3339"},
		{"run_at date only", "POST", "/submit_job", job(`,"run_at":"2030-01-02"`), nil, false, 400, wire.CodeInvalidField, "run_at"},
		{"run_at no zone", "POST", "/submit_job", job(`,"run_at":"2030-01-02T03:04:05"`), nil, false, 400, wire.CodeInvalidField, "run_at"},
		{"run_at bad month", "POST", "/submit_job", job(`,"run_at":"2030-13-02T03:04:05Z"`), nil, false, 400, wire.CodeInvalidField, "run_at"},
		{"run_at number", "POST", "/submit_job", job(`,"run_at":1700000000`), nil, false, 400, wire.CodeInvalidField, "run_at: must be a string"},
		{"run_at and delay", "POST", "/submit_job", job(`,"run_at":"2030-01-02T03:04:05Z","delay_seconds":5`), nil, false, 400, wire.CodeInvalidField, "run_at: give run_at or delay_seconds, not both"},

		// queue
		{"queue bad characters", "POST", "/submit_job", job(`,"queue":"bad queue!"`), nil, false, 400, wire.CodeInvalidField, "queue"},
		{"queue too long", "POST", "/submit_job", job(`,"queue":"` + big(65) + `"`), nil, false, 400, wire.CodeInvalidField, "queue"},
		{"queue number", "POST", "/submit_job", job(`,"queue":1`), nil, false, 400, wire.CodeInvalidField, "queue"},

		// idempotency
		{"key too long", "POST", "/submit_job", job(`,"idempotency_key":"` + big(201) + `"`), nil, false, 400, wire.CodeInvalidField, "idempotency_key: is 201 characters"},
		{"key control char", "POST", "/submit_job", job(`,"idempotency_key":"a\u0000"`), nil, false, 400, wire.CodeInvalidField, "idempotency_key"},
		{"key differs from header", "POST", "/submit_job", job(`,"idempotency_key":"a"`), []string{"Idempotency-Key", "b"}, false, 400, wire.CodeInvalidField, "idempotency_key: differs from the Idempotency-Key header"},
		{"header key too long", "POST", "/submit_job", job(``), []string{"Idempotency-Key", big(201)}, false, 400, wire.CodeInvalidField, "Idempotency-Key header"},
		{"header key not UTF-8", "POST", "/submit_job", job(``), []string{"Idempotency-Key", "k\xff"}, false, 400, wire.CodeInvalidField, "Idempotency-Key header: must be valid UTF-8"},

		// batches
		{"batch empty", "POST", "/submit_jobs", `[]`, nil, false, 400, wire.CodeInvalidField, "jobs: must hold at least one job"},
		{"batch over 1000", "POST", "/submit_jobs", items(1001, -1, ""), nil, false, 400, wire.CodeInvalidField, "jobs: holds 1001 jobs"},
		{"batch one bad name", "POST", "/submit_jobs", items(5, 3, `{"name":""}`), nil, false, 400, wire.CodeInvalidField, "jobs[3].name: required"},
		{"batch one bad type", "POST", "/submit_jobs", items(5, 4, `{"name":"a","priority":"x"}`), nil, false, 400, wire.CodeInvalidField, "jobs[4].priority: must be an integer"},
		{"batch one unknown field", "POST", "/submit_jobs", items(3, 1, `{"name":"a","x":1}`), nil, false, 400, wire.CodeInvalidField, "jobs[1].x: unknown field"},
		{"batch item not object", "POST", "/submit_jobs", items(3, 2, `7`), nil, false, 400, wire.CodeInvalidJSON, "jobs[2]: must be a JSON object"},
		{"batch bad payload", "POST", "/submit_jobs", items(3, 0, `{"name":"a","payload":"\u0000"}`), nil, false, 400, wire.CodeInvalidField, "jobs[0].payload"},
		{"batch duplicate keys", "POST", "/submit_jobs", `[{"name":"a","idempotency_key":"k"},{"name":"b","idempotency_key":"k"}]`, nil, false, 400, wire.CodeInvalidField, "jobs[1].idempotency_key: repeats the key of jobs[0]"},
		{"batch header key", "POST", "/submit_jobs", items(2, -1, ""), []string{"Idempotency-Key", "k"}, false, 400, wire.CodeInvalidField, "Idempotency-Key header"},
		{"batch object without jobs", "POST", "/submit_jobs", `{}`, nil, false, 400, wire.CodeInvalidField, "jobs: required"},
		{"batch object unknown field", "POST", "/submit_jobs", `{"jobs":[{"name":"a"}],"x":1}`, nil, false, 400, wire.CodeInvalidField, "x: unknown field"},
		{"batch malformed", "POST", "/submit_jobs", `[{"name":"a"},`, nil, false, 400, wire.CodeInvalidJSON, ""},
		{"batch trailing garbage", "POST", "/submit_jobs", `[{"name":"a"}]]`, nil, false, 400, wire.CodeInvalidJSON, ""},
		{"batch string", "POST", "/submit_jobs", `"a"`, nil, false, 400, wire.CodeInvalidJSON, "must be a JSON array of jobs"},
		{"batch null", "POST", "/submit_jobs", `null`, nil, false, 400, wire.CodeInvalidJSON, "must be a JSON array of jobs"},
		{"batch empty body", "POST", "/submit_jobs", ``, nil, false, 400, wire.CodeInvalidJSON, "empty"},
		{"batch jobs not array", "POST", "/submit_jobs", `{"jobs":{"name":"a"}}`, nil, false, 400, wire.CodeInvalidField, "jobs: must be an array"},
		{"batch over body limit", "POST", "/submit_jobs", `[{"name":"a","payload":"` + big(submitter.DefaultMaxBatchBodyBytes) + `"}]`, nil, true, 413, wire.CodeBodyTooLarge, ""},

		// ids
		{"get id letters", "GET", "/jobs/abc", "", nil, false, 400, wire.CodeInvalidID, "positive integer"},
		{"get id zero", "GET", "/jobs/0", "", nil, false, 400, wire.CodeInvalidID, ""},
		{"get id negative", "GET", "/jobs/-1", "", nil, false, 400, wire.CodeInvalidID, ""},
		{"get id plus", "GET", "/jobs/+1", "", nil, false, 400, wire.CodeInvalidID, ""},
		{"get id fraction", "GET", "/jobs/1.5", "", nil, false, 400, wire.CodeInvalidID, ""},
		{"get id overflow", "GET", "/jobs/9223372036854775808", "", nil, false, 400, wire.CodeInvalidID, ""},
		{"get id huge", "GET", "/jobs/" + strings.Repeat("9", 500), "", nil, false, 400, wire.CodeInvalidID, ""},
		{"get id escaped space", "GET", "/jobs/%201", "", nil, false, 400, wire.CodeInvalidID, ""},
		{"get unknown id", "GET", "/jobs/9223372036854775807", "", nil, false, 404, wire.CodeNotFound, ""},
		{"cancel bad id", "POST", "/jobs/x/cancel", "", nil, false, 400, wire.CodeInvalidID, ""},
		{"cancel unknown id", "POST", "/jobs/424242/cancel", "", nil, false, 404, wire.CodeNotFound, ""},
		{"cancel final job", "POST", "/jobs/" + completed.JobID + "/cancel", "", nil, false, 409, wire.CodeConflict, ""},
		{"requeue bad id", "POST", "/dlq/0/requeue", "", nil, false, 400, wire.CodeInvalidID, ""},
		{"requeue unknown id", "POST", "/dlq/424242/requeue", "", nil, false, 404, wire.CodeNotFound, ""},
		{"requeue pending job", "POST", "/dlq/" + pending.JobID + "/requeue", "", nil, false, 409, wire.CodeConflict, ""},
		{"requeue completed job", "POST", "/dlq/" + completed.JobID + "/requeue", "", nil, false, 409, wire.CodeConflict, ""},

		// query parameters
		{"list bad status", "GET", "/jobs?status=done", "", nil, false, 400, wire.CodeInvalidField, "status: must be one of waiting, pending"},
		{"list limit zero", "GET", "/jobs?limit=0", "", nil, false, 400, wire.CodeInvalidField, "limit"},
		{"list limit too big", "GET", "/jobs?limit=1001", "", nil, false, 400, wire.CodeInvalidField, "limit"},
		{"list limit letters", "GET", "/jobs?limit=ten", "", nil, false, 400, wire.CodeInvalidField, "limit"},
		{"list cursor letters", "GET", "/jobs?cursor=abc", "", nil, false, 400, wire.CodeInvalidField, "cursor"},
		{"list cursor negative", "GET", "/jobs?cursor=-5", "", nil, false, 400, wire.CodeInvalidField, "cursor"},
		{"list name NUL", "GET", "/jobs?name=a%00b", "", nil, false, 400, wire.CodeInvalidField, "name"},
		{"list name not UTF-8", "GET", "/jobs?name=%ff", "", nil, false, 400, wire.CodeInvalidField, "name"},
		{"dlq limit", "GET", "/dlq?limit=-1", "", nil, false, 400, wire.CodeInvalidField, "limit"},

		// routing
		{"unknown route", "GET", "/nope", "", nil, false, 404, wire.CodeRouteNotFound, ""},
		{"GET submit_job", "GET", "/submit_job", "", nil, false, 405, wire.CodeMethodNotAllowed, ""},
		{"DELETE submit_job", "DELETE", "/submit_job", "", nil, false, 405, wire.CodeMethodNotAllowed, ""},
		{"PUT job", "PUT", "/jobs/1", job(``), nil, false, 405, wire.CodeMethodNotAllowed, ""},
		{"GET cancel", "GET", "/jobs/1/cancel", "", nil, false, 405, wire.CodeMethodNotAllowed, ""},
		{"POST stats", "POST", "/stats", "", nil, false, 405, wire.CodeMethodNotAllowed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := *e
			e.t = t
			var status int
			var body []byte
			if tt.local {
				status, body = e.doLocal(tt.method, tt.path, []byte(tt.body), tt.headers...)
			} else {
				status, body = e.do(tt.method, tt.path, tt.body, tt.headers...)
			}
			var resp wire.ErrorResponse
			if err := json.Unmarshal(body, &resp); err != nil {
				t.Fatalf("answer %d is not the JSON error shape: %.200q", status, body)
			}
			if status != tt.status || resp.Error.Code != tt.code || !strings.Contains(resp.Error.Message, tt.msg) {
				t.Errorf("got %d %s %q, want %d %s containing %q", status, resp.Error.Code, resp.Error.Message, tt.status, tt.code, tt.msg)
			}
			if n := e.jobCount(); n != seeded {
				t.Errorf("jobs table has %d rows, want %d", n, seeded)
			}
		})
	}
	t.Cleanup(func() {
		if after := snapshot(); after != before {
			t.Errorf("jobs changed:\nbefore %s\nafter  %s", before, after)
		}
	})
}
