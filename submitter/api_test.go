package submitter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter"
)

func TestSubmitAndGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	r := e.submit(fmt.Sprintf(`{"name":"send_email","payload":{"to":"a@example.com","n":[1,2.5,null],"big":12345678901234567890},
		"queue":"mail","priority":7,"max_retries":5,"timeout_seconds":30,"run_at":%q}`, runAt.Format(time.RFC3339Nano)))
	if r.Status != "pending" {
		t.Errorf("status %q, want pending", r.Status)
	}
	if id, err := strconv.ParseInt(r.JobID, 10, 64); err != nil || id <= 0 {
		t.Fatalf("job_id %q is not a positive decimal string", r.JobID)
	}

	status, body := e.do("GET", "/jobs/"+r.JobID, "")
	if status != 200 {
		t.Fatalf("GET: %d %s", status, body)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"job_id", "name", "queue", "priority", "payload", "status", "attempts", "max_retries",
		"timeout_seconds", "last_error", "errors", "result", "worker_id", "created_at", "started_at", "finished_at",
		"next_run_at", "cancel_requested"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("GET /jobs/{id} lacks %q: %s", k, body)
		}
	}
	for k, want := range map[string]string{"last_error": "null", "result": "null", "worker_id": "null",
		"started_at": "null", "finished_at": "null", "errors": "[]", "cancel_requested": "false", "job_id": `"` + r.JobID + `"`} {
		if got := string(raw[k]); got != want {
			t.Errorf("%s = %s, want %s", k, got, want)
		}
	}
	j := e.getJob(r.JobID)
	if j.Name != "send_email" || j.Queue != "mail" || j.Priority != 7 || j.MaxRetries != 5 || j.TimeoutSeconds != 30 ||
		j.Status != "pending" || j.Attempts != 0 {
		t.Errorf("job = %+v", j)
	}
	var payload map[string]json.RawMessage
	if err := json.Unmarshal(j.Payload, &payload); err != nil {
		t.Fatalf("payload %s: %v", j.Payload, err)
	}
	if string(payload["big"]) != "12345678901234567890" || string(payload["n"]) != "[1, 2.5, null]" && string(payload["n"]) != "[1,2.5,null]" {
		t.Errorf("payload = %s", j.Payload)
	}
	if j.NextRunAt == nil || !j.NextRunAt.Equal(runAt) {
		t.Errorf("next_run_at = %v, want %v", j.NextRunAt, runAt)
	}
	if !strings.HasSuffix(string(raw["created_at"]), `Z"`) || !strings.HasSuffix(string(raw["next_run_at"]), `Z"`) {
		t.Errorf("times are not UTC: created_at %s next_run_at %s", raw["created_at"], raw["next_run_at"])
	}
	if time.Since(j.CreatedAt) > time.Minute || time.Since(j.CreatedAt) < -time.Minute {
		t.Errorf("created_at = %v", j.CreatedAt)
	}
}

func TestSubmitDefaultsAndForms(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		name, path, body string
		check            func(t *testing.T, j wire.Job)
	}{
		{"defaults", "/submit_job", `{"name":"a"}`, func(t *testing.T, j wire.Job) {
			if string(j.Payload) != "null" || j.Queue != "default" || j.Priority != 0 || j.MaxRetries != 3 || j.TimeoutSeconds != 0 {
				t.Errorf("defaults: %+v payload %s", j, j.Payload)
			}
			if j.NextRunAt == nil || time.Until(*j.NextRunAt) > time.Second {
				t.Errorf("next_run_at = %v, want now", j.NextRunAt)
			}
		}},
		{"string payload", "/submit_job", `{"name":"a","payload":"hello \"world\""}`, func(t *testing.T, j wire.Job) {
			if string(j.Payload) != `"hello \"world\""` {
				t.Errorf("payload = %s", j.Payload)
			}
		}},
		{"explicit null payload and zero retries", "/submit_job", `{"name":"a","payload":null,"max_retries":0}`, func(t *testing.T, j wire.Job) {
			if string(j.Payload) != "null" || j.MaxRetries != 0 {
				t.Errorf("job %+v payload %s", j, j.Payload)
			}
		}},
		{"type on /jobs", "/jobs", `{"type":"resize","payload":[1]}`, func(t *testing.T, j wire.Job) {
			if j.Name != "resize" {
				t.Errorf("name = %q", j.Name)
			}
		}},
		{"type equal to name", "/jobs", `{"type":"x","name":"x"}`, func(t *testing.T, j wire.Job) {
			if j.Name != "x" {
				t.Errorf("name = %q", j.Name)
			}
		}},
		{"limits accepted", "/submit_job", `{"name":"` + strings.Repeat("é", 128) + `","priority":-1000,"max_retries":100,
			"timeout_seconds":86400,"delay_seconds":31536000,"queue":"` + strings.Repeat("q", 64) + `","idempotency_key":"` + strings.Repeat("k", 200) + `"}`,
			func(t *testing.T, j wire.Job) {
				if j.NextRunAt == nil || time.Until(*j.NextRunAt) < 364*24*time.Hour {
					t.Errorf("next_run_at = %v, want a year ahead", j.NextRunAt)
				}
			}},
		{"delay", "/submit_job", `{"name":"a","delay_seconds":60}`, func(t *testing.T, j wire.Job) {
			if d := time.Until(*j.NextRunAt); d < 50*time.Second || d > 70*time.Second {
				t.Errorf("next_run_at in %v, want 60s", d)
			}
		}},
		{"run_at with offset", "/submit_job", `{"name":"a","run_at":"2031-06-01T12:00:00.5+02:00"}`, func(t *testing.T, j wire.Job) {
			if want := time.Date(2031, 6, 1, 10, 0, 0, 5e8, time.UTC); !j.NextRunAt.Equal(want) {
				t.Errorf("next_run_at = %v, want %v", j.NextRunAt, want)
			}
		}},
		{"run_at long ago", "/submit_job", `{"name":"a","run_at":"0001-01-01T00:00:00Z"}`, nil},
		{"payload edge values", "/submit_job", `{"name":"a","payload":{"emoji":"\ud83d\ude00","ctl":"\u0001","big":1e300,"tiny":-1.5e-300,"deep":` +
			strings.Repeat("[", 999) + strings.Repeat("]", 999) + `}}`, nil},
		{"case-insensitive field names", "/submit_job", `{"NAME":"a"}`, func(t *testing.T, j wire.Job) {
			if j.Name != "a" {
				t.Errorf("name = %q", j.Name)
			}
		}},
		{"form content type ignored", "/submit_job", `{"name":"a"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := *e
			e.t = t
			status, body := e.do("POST", tt.path, tt.body, "Content-Type", "application/x-www-form-urlencoded")
			var r wire.SubmitResponse
			e.must(201, &r, status, body)
			j := e.getJob(r.JobID)
			if tt.check != nil {
				tt.check(t, j)
			}
		})
	}
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []string
	for i := range 7 {
		name := "even"
		if i%2 == 1 {
			name = "odd"
		}
		ids = append(ids, e.submit(`{"name":"`+name+`"}`).JobID)
	}
	e.exec(`UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = $1`, ids[6])

	list := func(query string) wire.JobListResponse {
		t.Helper()
		var l wire.JobListResponse
		status, body := e.do("GET", "/jobs"+query, "")
		e.must(200, &l, status, body)
		return l
	}
	var got []string
	cursor, pages := "", 0
	for {
		q := "?limit=3"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		l := list(q)
		pages++
		for _, j := range l.Jobs {
			got = append(got, j.JobID)
		}
		if l.NextCursor == nil {
			break
		}
		cursor = *l.NextCursor
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
	}
	want := []string{ids[6], ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]}
	if strings.Join(got, ",") != strings.Join(want, ",") || pages != 3 {
		t.Errorf("pages %d, ids %v, want 3 pages of %v", pages, got, want)
	}

	if l := list(""); len(l.Jobs) != 7 || l.NextCursor != nil {
		t.Errorf("default list: %d jobs, next %v", len(l.Jobs), l.NextCursor)
	}
	if l := list("?name=odd"); len(l.Jobs) != 3 {
		t.Errorf("name=odd: %d jobs, want 3", len(l.Jobs))
	}
	if l := list("?status=completed"); len(l.Jobs) != 1 || l.Jobs[0].JobID != ids[6] {
		t.Errorf("status=completed: %+v", l.Jobs)
	}
	if l := list("?status=pending&name=even&limit=2"); len(l.Jobs) != 2 || l.NextCursor == nil ||
		l.Jobs[0].JobID != ids[4] || l.Jobs[1].JobID != ids[2] {
		t.Errorf("status=pending&name=even&limit=2: %+v", l)
	}
	if l := list("?name=nobody"); l.Jobs == nil || len(l.Jobs) != 0 {
		t.Errorf("empty list must be [], got %v", l.Jobs)
	}
	status, body := e.do("GET", "/jobs?name=nobody", "")
	if status != 200 || !strings.Contains(string(body), `"jobs":[]`) || !strings.Contains(string(body), `"next_cursor":null`) {
		t.Errorf("empty list answer: %s", body)
	}
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.submit(`{"name":"charge","idempotency_key":"order-42"}`)

	// The same key, in the header this time: 200, the same job, nothing new.
	status, body := e.do("POST", "/submit_job", `{"name":"charge","payload":{"other":true}}`, "Idempotency-Key", "order-42")
	var again wire.SubmitResponse
	e.must(200, &again, status, body)
	if again.JobID != first.JobID || again.Status != "pending" {
		t.Errorf("repeat = %+v, want job %s pending", again, first.JobID)
	}
	// Header and body agreeing is fine.
	status, body = e.do("POST", "/jobs", `{"type":"charge","idempotency_key":"order-42"}`, "Idempotency-Key", "order-42")
	e.must(200, &again, status, body)
	if again.JobID != first.JobID {
		t.Errorf("repeat via /jobs = %+v", again)
	}
	// The answer carries the job's current status.
	e.exec(`UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = $1`, first.JobID)
	status, body = e.do("POST", "/submit_job", `{"name":"charge","idempotency_key":"order-42"}`)
	e.must(200, &again, status, body)
	if again.JobID != first.JobID || again.Status != "completed" {
		t.Errorf("repeat after completion = %+v", again)
	}
	if n := e.jobCount(); n != 1 {
		t.Errorf("%d jobs, want 1", n)
	}
	// A different key is a different job.
	if other := e.submit(`{"name":"charge"}`, "Idempotency-Key", "order-43"); other.JobID == first.JobID {
		t.Errorf("a new key returned the old job")
	}
}

func TestBatchSubmit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	existing := e.submit(`{"name":"x","idempotency_key":"k-old"}`)

	var items []string
	for i := range 5 {
		items = append(items, fmt.Sprintf(`{"name":"batch-%d","payload":{"i":%d}}`, i, i))
	}
	items[2] = `{"type":"batch-2","idempotency_key":"k-new"}`
	items[3] = `{"name":"again","idempotency_key":"k-old"}`
	body := "[" + strings.Join(items, ",") + "]"
	var resp wire.BatchSubmitResponse
	status, b := e.do("POST", "/submit_jobs", body)
	e.must(201, &resp, status, b)
	if len(resp.Jobs) != 5 {
		t.Fatalf("%d results, want 5: %s", len(resp.Jobs), b)
	}
	var prev int64
	for i, r := range resp.Jobs {
		id, _ := strconv.ParseInt(r.JobID, 10, 64)
		if i == 3 {
			if r.JobID != existing.JobID || r.Status != "pending" {
				t.Errorf("jobs[3] = %+v, want the existing job %s", r, existing.JobID)
			}
			continue
		}
		if id <= prev {
			t.Errorf("jobs[%d] id %d not above the previous %d: ids must follow request order", i, id, prev)
		}
		prev = id
		if j := e.getJob(r.JobID); j.Name != fmt.Sprintf("batch-%d", i) {
			t.Errorf("jobs[%d] is %q", i, j.Name)
		}
	}
	if n := e.jobCount(); n != 5 {
		t.Errorf("%d jobs, want 5 (1 + 4 new)", n)
	}

	// Retrying a keyed batch creates nothing: 200 and the same ids.
	retry := `{"jobs":[{"name":"a","idempotency_key":"k-new"},{"name":"b","idempotency_key":"k-old"}]}`
	status, b = e.do("POST", "/submit_jobs", retry)
	var again wire.BatchSubmitResponse
	e.must(200, &again, status, b)
	if len(again.Jobs) != 2 || again.Jobs[0].JobID != resp.Jobs[2].JobID || again.Jobs[1].JobID != existing.JobID {
		t.Errorf("retried batch = %+v", again)
	}

	// The largest batch goes in as one statement.
	items = items[:0]
	for i := range 1000 {
		items = append(items, fmt.Sprintf(`{"name":"n%d"}`, i))
	}
	status, b = e.do("POST", "/submit_jobs", "["+strings.Join(items, ",")+"]")
	e.must(201, &resp, status, b)
	if len(resp.Jobs) != 1000 || e.jobCount() != 1005 {
		t.Errorf("1000-job batch: %d results, %d rows", len(resp.Jobs), e.jobCount())
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	t.Run("pending", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		r := e.submit(`{"name":"a"}`)
		var c wire.SubmitResponse
		status, body := e.do("POST", "/jobs/"+r.JobID+"/cancel", "")
		e.must(200, &c, status, body)
		if c.JobID != r.JobID || c.Status != "canceled" || c.CancelRequested {
			t.Errorf("cancel = %+v", c)
		}
		if j := e.getJob(r.JobID); j.Status != "canceled" || j.FinishedAt == nil {
			t.Errorf("after cancel: status %s finished_at %v", j.Status, j.FinishedAt)
		}
		status, body = e.do("POST", "/jobs/"+r.JobID+"/cancel", "")
		if status != 409 || !strings.Contains(string(body), `"conflict"`) {
			t.Errorf("second cancel: %d %s", status, body)
		}
	})

	t.Run("retrying", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		r := e.submit(`{"name":"a"}`)
		e.exec(`UPDATE jobs SET status = 'retrying', attempts = 1 WHERE id = $1`, r.JobID)
		var c wire.SubmitResponse
		status, body := e.do("POST", "/jobs/"+r.JobID+"/cancel", "")
		e.must(200, &c, status, body)
		if c.Status != "canceled" {
			t.Errorf("cancel = %+v", c)
		}
	})

	t.Run("leased", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		r := e.submit(`{"name":"a"}`)
		e.exec(`UPDATE jobs SET status = 'leased', lease_token = 77, worker_id = 'w1', attempts = 1,
			started_at = now(), lease_expires_at = now() + interval '1 minute' WHERE id = $1`, r.JobID)
		status, body := e.do("POST", "/jobs/"+r.JobID+"/cancel", "")
		if status != 202 || string(body) != `{"job_id":"`+r.JobID+`","status":"leased","cancel_requested":true}`+"\n" {
			t.Fatalf("cancel leased: %d %s", status, body)
		}
		msgs, err := e.rdb.LRange(t.Context(), e.prefix+"dts:worker:w1:control", 0, -1).Result()
		if err != nil || len(msgs) != 1 {
			t.Fatalf("control list: %v %v", msgs, err)
		}
		var ctl wire.Control
		if err := json.Unmarshal([]byte(msgs[0]), &ctl); err != nil {
			t.Fatal(err)
		}
		if id, _ := strconv.ParseInt(r.JobID, 10, 64); ctl.Op != wire.OpCancel || ctl.JobID != id || ctl.LeaseToken != 77 {
			t.Errorf("control = %+v", ctl)
		}
		j := e.getJob(r.JobID)
		if j.Status != "leased" || !j.CancelRequested || j.WorkerID == nil || *j.WorkerID != "w1" {
			t.Errorf("after cancel: %+v", j)
		}
	})
}

func TestDeadLetterQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.rdb.Subscribe(t.Context(), e.prefix+"dts:wakeup")
	t.Cleanup(func() { _ = sub.Close() })

	r := e.submit(`{"name":"flaky","payload":{"x":1},"max_retries":1}`)
	other := e.submit(`{"name":"fine"}`)
	errs := `[{"attempt":1,"error":"boom","reason":"error","worker_id":"w1","at":"2030-01-01T00:00:00Z"},
		{"attempt":2,"error":"boom again","reason":"error","worker_id":"w2","at":"2030-01-01T00:01:00+01:00"}]`
	e.exec(`UPDATE jobs SET status = 'failed', attempts = 2, finished_at = now(), last_error = 'boom again',
		dead_reason = 'max_retries_exceeded', errors = $2::jsonb WHERE id = $1`, r.JobID, errs)

	var dlq wire.DLQResponse
	status, body := e.do("GET", "/dlq", "")
	e.must(200, &dlq, status, body)
	if len(dlq.Jobs) != 1 {
		t.Fatalf("dlq = %s", body)
	}
	d := dlq.Jobs[0]
	if d.JobID != r.JobID || d.Reason != "max_retries_exceeded" || d.Status != "failed" || d.Attempts != 2 ||
		d.LastError == nil || *d.LastError != "boom again" || string(d.Payload) != `{"x": 1}` && string(d.Payload) != `{"x":1}` {
		t.Errorf("dlq job = %+v payload %s", d, d.Payload)
	}
	if len(d.Errors) != 2 || d.Errors[1].Error != "boom again" || d.Errors[1].WorkerID != "w2" ||
		!d.Errors[1].At.Equal(time.Date(2029, 12, 31, 23, 1, 0, 0, time.UTC)) || d.Errors[1].At.Location() != time.UTC {
		t.Errorf("dlq errors = %+v", d.Errors)
	}
	if !strings.Contains(string(body), `"at":"2030-01-01T00:00:00Z"`) {
		t.Errorf("attempt times are not UTC: %s", body)
	}
	if status, body := e.do("GET", "/dlq?limit=1000", ""); status != 200 {
		t.Errorf("dlq limit=1000: %d %s", status, body)
	}

	// Requeue: pending again, attempts reset, history kept, coordinator woken.
	if _, err := sub.Receive(t.Context()); err != nil { // the subscription is live
		t.Fatal(err)
	}
	var rq wire.SubmitResponse
	status, body = e.do("POST", "/dlq/"+r.JobID+"/requeue", "")
	e.must(200, &rq, status, body)
	if rq.JobID != r.JobID || rq.Status != "pending" {
		t.Errorf("requeue = %+v", rq)
	}
	select {
	case <-sub.Channel():
	case <-time.After(5 * time.Second):
		t.Error("no wake-up after requeue")
	}
	j := e.getJob(r.JobID)
	if j.Status != "pending" || j.Attempts != 0 || len(j.Errors) != 2 || j.FinishedAt != nil {
		t.Errorf("after requeue: %+v", j)
	}
	status, body = e.do("GET", "/dlq", "")
	e.must(200, &dlq, status, body)
	if len(dlq.Jobs) != 0 || !strings.Contains(string(body), `"jobs":[]`) {
		t.Errorf("dlq after requeue: %s", body)
	}
	if status, _ := e.do("POST", "/dlq/"+other.JobID+"/requeue", ""); status != 409 {
		t.Errorf("requeue of a pending job: %d, want 409", status)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var st wire.StatsResponse
	status, body := e.do("GET", "/stats", "")
	e.must(200, &st, status, body)
	if len(st.Jobs) != 7 || len(st.Workers) != 4 || st.QueueDepth != 0 || st.OldestPendingSeconds != 0 {
		t.Errorf("empty stats = %s", body)
	}

	a := e.submit(`{"name":"a"}`)
	e.submit(`{"name":"b"}`)
	e.submit(`{"name":"later","delay_seconds":3600}`)
	d := e.submit(`{"name":"dead"}`)
	e.exec(`UPDATE jobs SET created_at = created_at - interval '1 minute', next_run_at = next_run_at - interval '1 minute' WHERE id = $1`, a.JobID)
	e.exec(`UPDATE jobs SET status = 'failed', finished_at = now() WHERE id = $1`, d.JobID)
	e.exec(`INSERT INTO workers (id, state) VALUES ('w1', 'available'), ('w2', 'busy'), ('w3', 'busy')`)

	status, body = e.do("GET", "/stats", "")
	e.must(200, &st, status, body)
	wantJobs := map[string]int64{"pending": 3, "leased": 0, "retrying": 0, "completed": 0, "failed": 1, "canceled": 0}
	for k, v := range wantJobs {
		if st.Jobs[k] != v {
			t.Errorf("jobs[%s] = %d, want %d (%s)", k, st.Jobs[k], v, body)
		}
	}
	if st.QueueDepth != 2 || st.DLQDepth != 1 || st.OldestPendingSeconds < 59 || st.OldestPendingSeconds > 120 {
		t.Errorf("stats = %s", body)
	}
	if st.Workers["available"] != 1 || st.Workers["busy"] != 2 || st.Workers["draining"] != 0 {
		t.Errorf("workers = %v", st.Workers)
	}
}

func TestWakeOnSubmit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.rdb.Subscribe(t.Context(), e.prefix+"dts:wakeup")
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(t.Context()); err != nil {
		t.Fatal(err)
	}
	ch := sub.Channel()
	// expectWake reads the next wake-up: "n" and the jobs' names, "l" when
	// jobs with a limit_key were made due (wire.Wake).
	expectWake := func(what, want string) {
		t.Helper()
		select {
		case m := <-ch:
			if m.Channel != e.prefix+"dts:wakeup" || m.Payload != want {
				t.Errorf("after %s: wake-up %q on %q; want %q", what, m.Payload, m.Channel, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no wake-up after %s", what)
		}
	}
	e.submit(`{"name":"a"}`)
	expectWake("submit", "na")
	status, body := e.do("POST", "/submit_jobs", `[{"name":"a"},{"name":"b"}]`)
	e.must(201, nil, status, body)
	expectWake("batch", "na\nb")

	// A repeated idempotency key creates nothing and wakes nobody; a
	// submission after it does (and is the next message).
	e.submit(`{"name":"a","idempotency_key":"k"}`)
	expectWake("keyed submit", "na")
	status, body = e.do("POST", "/submit_job", `{"name":"a","idempotency_key":"k"}`)
	e.must(200, nil, status, body)
	e.submit(`{"name":"marker"}`)
	expectWake("marker", "nmarker")
	select {
	case <-ch:
		t.Error("a repeated idempotency key woke the coordinator")
	case <-time.After(100 * time.Millisecond):
	}

	// Jobs with a limit_key, by their concurrency key or by a limit on
	// their name, make the wake-up limited, alone or in a batch; setting
	// a limit wakes (limited) too.
	e.submit(`{"name":"a","concurrency_key":"tenant-1"}`)
	expectWake("a concurrency key", "l")
	status, body = e.do("PUT", "/limits/name:capped", `{"concurrency":1}`)
	e.must(200, nil, status, body)
	expectWake("a limit set", "l")
	e.submit(`{"name":"capped"}`)
	expectWake("a job whose name has a limit", "l")
	status, body = e.do("POST", "/submit_jobs", `[{"name":"a"},{"name":"capped"},{"name":"b"}]`)
	e.must(201, nil, status, body)
	expectWake("a batch with a limited job", "l")
	e.submit(`{"name":"a"}`)
	expectWake("a plain submit after them", "na")

	// A batch of more names than a wake-up carries says any name.
	var batch []string
	for i := range wire.MaxWakeNames + 1 {
		batch = append(batch, fmt.Sprintf(`{"name":"n%02d"}`, i))
	}
	status, body = e.do("POST", "/submit_jobs", "["+strings.Join(batch, ",")+"]")
	e.must(201, nil, status, body)
	expectWake("a batch of many names", "1")
}

// TestRedisDown: with Redis gone, /readyz says so and submissions still
// succeed (PostgreSQL is the record; the wake-up is best effort).
func TestRedisDown(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	e := newEnv(t, func(c *submitter.Config) { c.RedisURL = rs.URL() })
	status, body := e.do("GET", "/readyz", "")
	if status != 200 || string(body) != `{"status":"ok"}`+"\n" {
		t.Fatalf("readyz: %d %s", status, body)
	}
	rs.Stop()

	status, body = e.do("GET", "/readyz", "")
	var er wire.ErrorResponse
	_ = json.Unmarshal(body, &er)
	if status != 503 || er.Error.Code != wire.CodeNotReady || !strings.Contains(er.Error.Message, "redis") ||
		strings.Contains(er.Error.Message, "postgres") {
		t.Errorf("readyz with Redis down: %d %s", status, body)
	}
	r := e.submit(`{"name":"a"}`)
	if e.getJob(r.JobID).Status != "pending" {
		t.Error("job not stored")
	}
	// The wake-up is published in the background: wait for its failure.
	testwait.For(t, 5*time.Second, "the failed wake-up to be counted", func() bool {
		_, body = e.do("GET", "/metrics", "")
		return strings.Contains(string(body), "dts_submit_wake_errors_total 1")
	})
	if !strings.Contains(string(body), `dts_redis_errors_total{op="ping"} 1`) ||
		!strings.Contains(string(body), `dts_redis_errors_total{op="wake"} 1`) {
		t.Errorf("metrics after Redis failures:\n%s", grep(string(body), "dts_"))
	}
	if status, _ := e.do("GET", "/healthz", ""); status != 200 {
		t.Errorf("healthz: %d", status)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.submit(`{"name":"a"}`)
	e.do("POST", "/submit_jobs", `[{"name":"a"},{"name":"b"}]`)
	e.do("GET", "/jobs/123456", "")
	status, body := e.do("GET", "/metrics", "")
	if status != 200 {
		t.Fatalf("metrics: %d", status)
	}
	for _, want := range []string{
		"dts_jobs_submitted_total 3",
		`http_requests_total{code="201",method="POST",route="/submit_job"} 1`,
		`http_requests_total{code="404",method="GET",route="/jobs/{id}"} 1`,
		`http_request_duration_seconds_bucket{method="POST",route="/submit_jobs",le="+Inf"} 1`,
		"go_goroutines",
		"process_open_fds",
		`dts_store_errors_total{op="insert"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if status, body := e.do("GET", "/healthz", ""); status != 200 || string(body) != `{"status":"ok"}`+"\n" {
		t.Errorf("healthz: %d %s", status, body)
	}
	for path, want := range map[string]string{"/submit_job": "POST", "/jobs": "GET, POST"} {
		req, _ := http.NewRequestWithContext(t.Context(), "DELETE", e.http.URL+path, nil)
		resp, err := e.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != want {
			t.Errorf("DELETE %s: %d Allow %q, want 405 Allow %q", path, resp.StatusCode, resp.Header.Get("Allow"), want)
		}
	}
}

// TestRun serves on a real listener and shuts down when the context ends.
func TestRun(t *testing.T) {
	t.Parallel()
	cfg := submitter.Config{DatabaseURL: pgtest.NewDatabase(t), RedisURL: redistest.URL(), RedisPrefix: redistest.Prefix(t),
		ShutdownTimeout: 5 * time.Second}
	srv, err := submitter.New(t.Context(), cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()

	base := "http://" + ln.Addr().String()
	resp, err := http.Post(base+"/submit_job", "application/json", strings.NewReader(`{"name":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("submit: %d", resp.StatusCode)
	}
	resp, err = http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("readyz: %d", resp.StatusCode)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("still serving after shutdown")
	}
	srv.Close() // idempotent after Run
}

func TestNewConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  submitter.Config
		want string
	}{
		{submitter.Config{RedisURL: "redis://x"}, "DatabaseURL"},
		{submitter.Config{DatabaseURL: "postgres://x"}, "RedisURL"},
		{submitter.Config{DatabaseURL: "postgres://x", RedisURL: "redis://x", MaxPayloadBytes: 3 << 20}, "MaxPayloadBytes"},
		{submitter.Config{DatabaseURL: "postgres://x", RedisURL: "redis://x", MaxBodyBytes: -1}, "MaxBodyBytes"},
		{submitter.Config{DatabaseURL: "postgres://x", RedisURL: "redis://x", ShutdownTimeout: -time.Second}, "ShutdownTimeout"},
	}
	for _, tt := range tests {
		_, err := submitter.New(t.Context(), tt.cfg, testLogger(t))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
	cfg := submitter.Config{}.WithDefaults()
	if cfg.Addr != "127.0.0.1:8000" || cfg.MaxBodyBytes != 2<<20 || cfg.MaxBatchBodyBytes != 16<<20 ||
		cfg.MaxPayloadBytes != 1<<20 || cfg.ReadHeaderTimeout != 5*time.Second || cfg.ShutdownTimeout != 10*time.Second ||
		cfg.IdleTimeout != 120*time.Second {
		t.Errorf("defaults = %+v", cfg)
	}
}

func grep(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
