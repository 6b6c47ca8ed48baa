package submitter_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/wire"
)

// newScheduleID inserts a schedule row behind the API and returns its id.
func newScheduleID(e *env) string {
	e.t.Helper()
	var id int64
	if err := e.db.QueryRow(e.t.Context(), `INSERT INTO schedules (name, cron, time_zone, overlap, catch_up, job_name, next_fire_at)
		VALUES ('s' || nextval('schedules_id_seq'), '0 * * * *', 'UTC', 'skip', 'one', 'report', now() + interval '1 hour') RETURNING id`).Scan(&id); err != nil {
		e.t.Fatal(err)
	}
	return fmt.Sprint(id)
}

func (e *env) createSchedule(body string) wire.Schedule {
	e.t.Helper()
	var sc wire.Schedule
	status, b := e.do("POST", "/schedules", body)
	e.must(http.StatusCreated, &sc, status, b)
	return sc
}

// TestScheduleValidation: each bad body is refused with invalid_field (or
// invalid_json) naming the field, and writes nothing.
func TestScheduleValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createSchedule(`{"name":"taken","cron":"@daily","job":{"name":"x"}}`)
	for _, c := range []struct {
		body, code, msg string
	}{
		{`[]`, wire.CodeInvalidJSON, "must be a JSON object"},
		{`{"cron":"* * * * *","job":{"name":"x"}}`, wire.CodeInvalidField, "name: required"},
		{`{"name":"a\u0001","cron":"* * * * *","job":{"name":"x"}}`, wire.CodeInvalidField, "name: must not contain control"},
		{`{"name":"a","job":{"name":"x"}}`, wire.CodeInvalidField, "cron: required"},
		{`{"name":"a","cron":"* * *","job":{"name":"x"}}`, wire.CodeInvalidField, "cron: not a cron expression"},
		{`{"name":"a","cron":"99 * * * *","job":{"name":"x"}}`, wire.CodeInvalidField, "cron: not a cron expression"},
		{`{"name":"a","cron":"@every 1s","job":{"name":"x"}}`, wire.CodeInvalidField, "cron: @every"},
		{`{"name":"a","cron":"0 0 31 2 *","job":{"name":"x"}}`, wire.CodeInvalidField, "cron: never fires"},
		{`{"name":"a","cron":"* * * * *","time_zone":"Mars/Olympus","job":{"name":"x"}}`, wire.CodeInvalidField, "time_zone: unknown time zone"},
		{`{"name":"a","cron":"* * * * *","time_zone":"Local","job":{"name":"x"}}`, wire.CodeInvalidField, "time_zone: must be an IANA"},
		{`{"name":"a","cron":"* * * * *","overlap":"queue","job":{"name":"x"}}`, wire.CodeInvalidField, "overlap: must be skip or allow"},
		{`{"name":"a","cron":"* * * * *","catch_up":"all","job":{"name":"x"}}`, wire.CodeInvalidField, "catch_up: must be none or one"},
		{`{"name":"a","cron":"* * * * *"}`, wire.CodeInvalidField, "job: required"},
		{`{"name":"a","cron":"* * * * *","job":"x"}`, wire.CodeInvalidJSON, "job: must be a JSON object"},
		{`{"name":"a","cron":"* * * * *","job":{}}`, wire.CodeInvalidField, "job.name: required"},
		{`{"name":"a","cron":"* * * * *","job":{"name":"x","priority":5000}}`, wire.CodeInvalidField, "job.priority: must be between"},
		{`{"name":"a","cron":"* * * * *","job":{"name":"x","colour":1}}`, wire.CodeInvalidField, "job.colour: unknown field"},
		{`{"name":"a","cron":"* * * * *","job":{"name":"x","run_at":"2030-01-01T00:00:00Z"}}`, wire.CodeInvalidField, "job.run_at: not allowed"},
		{`{"name":"a","cron":"* * * * *","job":{"name":"x","delay_seconds":1}}`, wire.CodeInvalidField, "job.delay_seconds: not allowed"},
		{`{"name":"a","cron":"* * * * *","job":{"name":"x","idempotency_key":"k"}}`, wire.CodeInvalidField, "job.idempotency_key: not allowed"},
		{`{"name":"a","cron":"* * * * *","job":{"name":"x"},"every":1}`, wire.CodeInvalidField, "every: unknown field"},
	} {
		status, b := e.do("POST", "/schedules", c.body)
		var er wire.ErrorResponse
		_ = json.Unmarshal(b, &er)
		if status/100 != 4 || er.Error.Code != c.code || !strings.Contains(er.Error.Message, c.msg) {
			t.Errorf("%s: %d %s, want %s %q", c.body, status, b, c.code, c.msg)
		}
	}
	status, b := e.do("POST", "/schedules", `{"name":"taken","cron":"@hourly","job":{"name":"x"}}`)
	if status != http.StatusConflict || errCode(t, b) != wire.CodeConflict || !strings.Contains(string(b), "name:") {
		t.Errorf("a taken name: %d %s, want 409 conflict naming the field", status, b)
	}
	if n := e.count(`SELECT count(*) FROM schedules`); n != 1 {
		t.Errorf("%d schedules after refused requests, want 1", n)
	}
	for _, path := range []string{"/schedules/0", "/schedules/x", "/schedules/1x/pause"} {
		method := "GET"
		if strings.HasSuffix(path, "pause") {
			method = "POST"
		}
		if status, b := e.do(method, path, ""); status != http.StatusBadRequest || errCode(t, b) != wire.CodeInvalidID {
			t.Errorf("%s %s: %d %s, want 400 invalid_id", method, path, status, b)
		}
	}
	for _, r := range []struct{ method, path string }{{"GET", "/schedules/999"}, {"POST", "/schedules/999/pause"},
		{"POST", "/schedules/999/resume"}, {"POST", "/schedules/999/trigger"}, {"DELETE", "/schedules/999"}} {
		if status, b := e.do(r.method, r.path, ""); status != http.StatusNotFound || errCode(t, b) != wire.CodeNotFound {
			t.Errorf("%s %s: %d %s, want 404 not_found", r.method, r.path, status, b)
		}
	}
}

// TestScheduleLifecycle: create, get, list, pause, resume, trigger and
// delete, with next and last fire times as the API shows them.
func TestScheduleLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := time.Now().Add(-time.Second)
	sc := e.createSchedule(`{"name":"nightly","cron":"0 30 2 * * *","time_zone":"Europe/Paris",
		"job":{"name":"report","payload":{"k":1},"max_retries":1,"priority":5}}`)
	if sc.ScheduleID == "" || sc.Overlap != "skip" || sc.CatchUp != "one" || sc.Paused || sc.LastFireAt != nil || sc.LastJobID != nil {
		t.Errorf("created: %+v", sc)
	}
	if sc.Job.Name != "report" || sc.Job.Queue != "default" || sc.Job.MaxRetries != 1 || sc.Job.Priority != 5 || string(sc.Job.Payload) != `{"k":1}` {
		t.Errorf("template: %+v (payload %s)", sc.Job, sc.Job.Payload)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	if sc.NextFireAt == nil || !sc.NextFireAt.After(before) || sc.NextFireAt.Sub(before) > 25*time.Hour ||
		sc.NextFireAt.In(paris).Hour() != 2 || sc.NextFireAt.In(paris).Minute() != 30 {
		t.Errorf("next fire %v, want the next 02:30 in Paris", sc.NextFireAt)
	}

	var got wire.Schedule
	status, b := e.do("GET", "/schedules/"+sc.ScheduleID, "")
	e.must(http.StatusOK, &got, status, b)
	if got.Name != "nightly" || got.TimeZone != "Europe/Paris" || !got.NextFireAt.Equal(*sc.NextFireAt) {
		t.Errorf("get: %+v", got)
	}
	e.createSchedule(`{"name":"second","cron":"*/10 * * * * *","overlap":"allow","catch_up":"none","job":{"name":"x"}}`)
	var page wire.ScheduleListResponse
	status, b = e.do("GET", "/schedules?limit=1", "")
	e.must(http.StatusOK, &page, status, b)
	if len(page.Schedules) != 1 || page.Schedules[0].Name != "second" || page.NextCursor == nil {
		t.Fatalf("first page: %s", b)
	}
	status, b = e.do("GET", "/schedules?limit=1&cursor="+*page.NextCursor, "")
	e.must(http.StatusOK, &page, status, b)
	if len(page.Schedules) != 1 || page.Schedules[0].Name != "nightly" || page.NextCursor != nil {
		t.Fatalf("second page: %s", b)
	}

	status, b = e.do("POST", "/schedules/"+sc.ScheduleID+"/pause", "")
	e.must(http.StatusOK, &got, status, b)
	if !got.Paused || got.NextFireAt != nil {
		t.Errorf("paused: %s", b)
	}
	status, b = e.do("POST", "/schedules/"+sc.ScheduleID+"/resume", "")
	e.must(http.StatusOK, &got, status, b)
	if got.Paused || got.NextFireAt == nil || !got.NextFireAt.Equal(*sc.NextFireAt) {
		t.Errorf("resumed: %s", b)
	}

	var sub wire.SubmitResponse
	status, b = e.do("POST", "/schedules/"+sc.ScheduleID+"/trigger", "")
	e.must(http.StatusCreated, &sub, status, b)
	j := e.getJob(sub.JobID)
	if j.Name != "report" || j.Priority != 5 || j.MaxRetries != 1 || j.Status != "pending" {
		t.Errorf("triggered job: %+v", j)
	}
	status, b = e.do("GET", "/schedules/"+sc.ScheduleID, "")
	e.must(http.StatusOK, &got, status, b)
	if got.LastFireAt != nil || got.LastJobID != nil {
		t.Errorf("a trigger counted as a tick: %s", b)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE target_type = 'schedule'`); n != 5 {
		t.Errorf("%d audit rows for schedules, want 5 (two creates, pause, resume, trigger)", n)
	}

	status, b = e.do("DELETE", "/schedules/"+sc.ScheduleID, "")
	e.must(http.StatusOK, &got, status, b)
	if got.Name != "nightly" {
		t.Errorf("deleted: %s", b)
	}
	if status, _ := e.do("GET", "/schedules/"+sc.ScheduleID, ""); status != http.StatusNotFound {
		t.Errorf("get after delete: %d", status)
	}
	if e.getJob(sub.JobID).Status != "pending" {
		t.Error("the deleted schedule's job is gone")
	}
}
