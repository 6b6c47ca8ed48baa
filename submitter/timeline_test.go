package submitter_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/wire"
)

// TestJobTimelineAPI: GET /jobs/{id}/timeline over a job's stored history
// (errors entries old and new, a stale result, an audited cancel): the
// attempts and entries in order, tokens as decimal strings, the cancel's
// actor only for the admin scope; 404 and 400 as GET /jobs/{id}.
func TestJobTimelineAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	admin, _ := e.apiKey("ops", "admin")
	reader, _ := e.apiKey("viewer", "read")
	r := e.submit(`{"name":"flaky","max_retries":5}`, bearer(admin)...)
	// Attempt 1 recorded before migration 014, attempt 2 after; a late
	// result of attempt 2's lease; then an operator's cancel.
	e.exec(`UPDATE jobs SET created_at = now() - interval '20 seconds', attempts = 2, worker_id = 'w2', errors = jsonb_build_array(
		jsonb_build_object('attempt', 1, 'error', 'old', 'reason', 'timeout', 'worker_id', 'w1', 'at', now() - interval '9 seconds'),
		jsonb_build_object('attempt', 2, 'error', 'new', 'reason', 'error', 'worker_id', 'w2', 'at', now() - interval '7 seconds',
			'token', 9007199254740993, 'started', now() - interval '8 seconds', 'extended', 1, 'next_state', 'retrying',
			'retry_at', now() - interval '5 seconds')) WHERE id = $1`, r.JobID)
	e.exec(`INSERT INTO job_events (job_id, at, kind, detail) VALUES ($1, now() - interval '6 seconds', 'stale_result',
		'{"worker_id":"w2","token":9007199254740993,"attempt":2,"outcome":"completed"}')`, r.JobID)
	if status, body := e.do("POST", "/jobs/"+r.JobID+"/cancel", "", bearer(admin)...); status != 200 {
		t.Fatalf("cancel: %d %s", status, body)
	}

	get := func(key string) (wire.JobTimeline, string) {
		t.Helper()
		status, body := e.do("GET", "/jobs/"+r.JobID+"/timeline", "", bearer(key)...)
		var tl wire.JobTimeline
		e.must(200, &tl, status, body)
		return tl, string(body)
	}
	tl, body := get(admin)
	if tl.JobID != r.JobID || tl.Status != "canceled" || len(tl.Attempts) != 2 {
		t.Fatalf("timeline = %s", body)
	}
	a1, a2 := tl.Attempts[0], tl.Attempts[1]
	if a1.LeaseToken != "" || a1.StartedAt != nil || a1.DurationMS != nil || a1.Outcome != "timeout" || a1.WorkerID != "w1" {
		t.Errorf("the old attempt = %+v", a1)
	}
	if a2.LeaseToken != "9007199254740993" || a2.DurationMS == nil || *a2.DurationMS != 1000 || a2.LeaseExtensions != 1 ||
		a2.RetryAt == nil || a2.NextState != "retrying" {
		t.Errorf("the new attempt = %+v", a2)
	}
	if !strings.Contains(body, `"lease_token":"9007199254740993"`) {
		t.Errorf("the token is not a decimal string: %s", body)
	}
	var kinds []string
	var cancel wire.TimelineEntry
	for _, en := range tl.Timeline {
		kinds = append(kinds, en.Kind)
		if en.Kind == "operator" {
			cancel = en
		}
	}
	if got, want := strings.Join(kinds, " "), "submitted failed leased failed backoff stale_result operator canceled"; got != want {
		t.Errorf("kinds = %s, want %s", got, want)
	}
	if cancel.Action != "job.cancel" || cancel.Result != "ok" || !strings.HasPrefix(cancel.Actor, "api_key:") {
		t.Errorf("the cancel = %+v", cancel)
	}
	// The errors of GET /jobs/{id} carry the new fields too.
	status, body2 := e.do("GET", "/jobs/"+r.JobID, "", bearer(reader)...)
	var j wire.Job
	e.must(200, &j, status, body2)
	if len(j.Errors) != 2 || j.Errors[1].LeaseToken != "9007199254740993" || j.Errors[1].StartedAt == nil || j.Errors[0].LeaseToken != "" {
		t.Errorf("GET /jobs/{id} errors = %+v", j.Errors)
	}

	// Read only: no actor.
	tl, body = get(reader)
	for _, en := range tl.Timeline {
		if en.Kind == "operator" && en.Actor != "" {
			t.Errorf("read only sees the actor: %s", body)
		}
	}
	for _, c := range []struct {
		path   string
		status int
	}{{"/jobs/999999/timeline", 404}, {"/jobs/x/timeline", 400}} {
		status, body := e.do("GET", c.path, "", bearer(reader)...)
		var out map[string]any
		if status != c.status || json.Unmarshal(body, &out) != nil {
			t.Errorf("GET %s = %d %s, want %d", c.path, status, body, c.status)
		}
	}
}
