package ui

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

// The operator pages' fixtures: hostile and very long strings in every
// field a page shows.

var opsT0 = time.Now().Add(-3 * time.Second)

func (f *fakeService) WorkerList(context.Context) ([]wire.Worker, error) {
	opsT0 := time.Now().Add(-3500 * time.Millisecond) // "3s ago" when rendered within half a second
	long := strings.Repeat("w", 3000)
	leased := make([]string, 13)
	for i := range leased {
		leased[i] = itoa(int64(100 + i))
	}
	return []wire.Worker{
		{WorkerID: hostile + "/?#" + long, Host: hostile + long, Version: hostile, JobTypes: []string{hostile, "*"}, State: "busy",
			Concurrency: 13, InFlight: 13, LastHeartbeatAt: opsT0, LeasedJobs: leased},
		{WorkerID: "w2", Host: "h2", Version: "v1", JobTypes: []string{"email"}, State: "available", Concurrency: 4,
			LastHeartbeatAt: opsT0.Add(-2 * time.Hour), DrainRequestedAt: &opsT0, DrainRequestedBy: hostile, LeasedJobs: []string{}},
		{WorkerID: "gone", State: "unavailable", Concurrency: 1, LastHeartbeatAt: opsT0, LeasedJobs: []string{},
			DrainRequestedAt: &opsT0, DrainRequestedBy: "apikey:1"},
		{WorkerID: "down", State: "unavailable", Concurrency: 1, LastHeartbeatAt: opsT0, LeasedJobs: []string{}},
	}, nil
}

func (f *fakeService) WorkerDrain(_ context.Context, id string) (wire.Worker, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id != "w 1/x" && id != "w2" {
		return wire.Worker{}, httpx.Errorf(http.StatusNotFound, wire.CodeNotFound, "no such worker")
	}
	f.drained = append(f.drained, id)
	return wire.Worker{WorkerID: id}, nil
}

func (f *fakeService) WorkerUndrain(_ context.Context, id string) (wire.Worker, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id != "w2" && id != "gone" {
		return wire.Worker{}, httpx.Errorf(http.StatusNotFound, wire.CodeNotFound, "no such worker")
	}
	f.undrained = append(f.undrained, id)
	return wire.Worker{WorkerID: id}, nil
}

func (f *fakeService) ScheduledList(_ context.Context, _ int, cursor string) (wire.ScheduledJobsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	later := time.Now().Add(90 * time.Minute)
	j := f.jobs[4]
	j.NextRunAt = &later
	c := "123-4"
	return wire.ScheduledJobsResponse{Jobs: []wire.Job{j}, NextCursor: &c}, nil
}

func (f *fakeService) ScheduleList(context.Context, int, string) (wire.ScheduleListResponse, error) {
	last := "4"
	return wire.ScheduleListResponse{Schedules: []wire.Schedule{{ScheduleID: "9", Name: hostile, Cron: hostile + strings.Repeat("*", 500),
		TimeZone: "UTC", Job: wire.ScheduleJob{Name: hostile}, Paused: true, NextFireAt: &opsT0, LastJobID: &last}}}, nil
}

func (f *fakeService) JobRunNow(_ context.Context, id int64) (wire.SubmitResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.jobs[id].Status != "pending" {
		return wire.SubmitResponse{}, job.ErrConflict
	}
	f.ran = append(f.ran, id)
	return wire.SubmitResponse{JobID: itoa(id), Status: "pending"}, nil
}

func (f *fakeService) JobCancel(_ context.Context, id int64) (wire.SubmitResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.canceled = append(f.canceled, id)
	return wire.SubmitResponse{JobID: itoa(id), Status: "canceled"}, nil
}

func (f *fakeService) JobDelete(_ context.Context, id int64) (wire.SubmitResponse, error) {
	return wire.SubmitResponse{JobID: itoa(id), Status: "deleted"}, nil
}

func (f *fakeService) BulkCount(_ context.Context, req wire.BulkRequest) (int64, error) {
	if req.Status == "completed" && req.Action == wire.BulkRequeue {
		return 0, httpx.InvalidField("status", "requeue applies to failed")
	}
	return 1234, nil
}

func (f *fakeService) BulkStart(_ context.Context, req wire.BulkRequest) (wire.BulkResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bulk = append(f.bulk, req)
	return wire.BulkResponse{Action: req.Action, Matched: 1234, OperationID: "55"}, nil
}

func (f *fakeService) OperationGet(_ context.Context, id int64) (wire.Operation, error) {
	if id != 55 && id != 56 {
		return wire.Operation{}, httpx.Errorf(http.StatusNotFound, wire.CodeNotFound, "no such operation")
	}
	op := wire.Operation{OperationID: itoa(id), Action: "requeue", Statuses: []string{"failed"}, Name: hostile, Queue: "q.x",
		State: wire.OperationRunning, Matched: 1234, Processed: 617, Affected: 600, Actor: hostile, CreatedAt: opsT0, UpdatedAt: opsT0}
	if id == 56 {
		op.State, op.FinishedAt, op.Error, op.CanceledBy = wire.OperationFailed, &opsT0, hostile, hostile
	}
	return op, nil
}

func (f *fakeService) OperationCancel(_ context.Context, id int64) (wire.Operation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opCanceled = append(f.opCanceled, id)
	return wire.Operation{OperationID: itoa(id), State: wire.OperationCanceled}, nil
}

func TestOpsPagesRender(t *testing.T) {
	t.Parallel()
	c, _ := newConsole(t, true)
	for _, tc := range []struct {
		name, target, token string
		status              int
		want, wantNot       []string
		headers             []string
	}{
		{name: "workers", target: "/workers", token: "admin", status: 200,
			want: []string{`13 / 13`, `3s ago`, `2h 0m ago`, "&lt;script&gt;", `href="./jobs/109"`, "and 3 more",
				`action="./workers/%3Cscript%3Ealert%281%29%3C%2Fscript%3E%22%27%3E%3Cimg%20src=x%20onerror=alert%282%29%3E%2F%3F%23`,
				`drain requested`, "wstate-unavailable", ", any</td>",
				// A drain-requested worker offers Undrain instead of Drain,
				// an unavailable one too (it keeps the request if it restarts).
				`action="./workers/w2/undrain"`, `action="./workers/gone/undrain"`},
			wantNot: []string{`action="./workers/gone/drain"`, `action="./workers/w2/drain"`, `action="./workers/down/`,
				`/%3Cscript%3Ealert%281%29%3C%2Fscript%3E%22%27%3E%3Cimg%20src=x%20onerror=alert%282%29%3E%2F%3F%23` + strings.Repeat("w", 3000) + `/undrain"`}},
		{name: "workers read only", target: "/workers", token: "read", status: 200, want: []string{"drain requested"},
			wantNot: []string{"<button type=\"submit\" class=\"drain\"", "/drain", "/undrain", "Undrain"}},
		{name: "workers flash", target: "/workers?done=drain", token: "admin", status: 200, want: []string{"Drain requested"}},
		{name: "workers undrain flash", target: "/workers?done=undrain", token: "admin", status: 200, want: []string{"Drain withdrawn"}},
		{name: "workers unknown flash", target: "/workers?done=" + url.QueryEscape(hostile), token: "admin", status: 200, wantNot: []string{`class="flash"`}},
		{name: "scheduled", target: "/scheduled", token: "admin", status: 200,
			want: []string{`action="./scheduled/4/run"`, `action="./scheduled/4/cancel"`, `1h 29m`, `href="./scheduled?cursor=123-4"`,
				"paused", `href="./jobs/4"`}},
		{name: "scheduled read only", target: "/scheduled", token: "read", status: 200, wantNot: []string{"/run\"", "/cancel\"", "<button type=\"submit\" class=\"run"}},
		{name: "jobs all matching", target: "/jobs?q=" + url.QueryEscape("state:failed name:"+quoted(hostile)), token: "admin", status: 200,
			wantNot: []string{`id="bulk-review"`}}, // nothing listed: nothing to act on
		{name: "jobs all matching form", target: "/jobs?q=state:failed", token: "admin", status: 200,
			want: []string{`id="bulk-review"`, `name="q" value="state:failed"`, `action="./bulk"`}},
		{name: "jobs all matching read only", target: "/jobs?q=state:failed", token: "read", status: 200, wantNot: []string{`bulk-review`}},
		{name: "dlq all matching", target: "/dlq", token: "admin", status: 200,
			want: []string{`name="q" value="state:failed"`, `name="from" value="dlq"`}, wantNot: []string{`value="cancel"`}},
		{name: "bulk confirm", target: "/bulk?action=requeue&from=dlq&q=" + url.QueryEscape("state:failed name:"+quoted(hostile)), token: "admin", status: 200,
			want: []string{`id="bulk-matched">1234<`, `id="bulk-confirm"`, `method="post" action="./bulk"`, `Requeue 1234 jobs`, `href="./dlq"`}},
		{name: "bulk confirm bad action", target: "/bulk?action=" + url.QueryEscape(hostile) + "&q=", token: "admin", status: 400,
			want: []string{"must be requeue, cancel or delete"}, wantNot: []string{"bulk-confirm"}},
		{name: "bulk confirm bad filter", target: "/bulk?action=requeue&q=" + url.QueryEscape("state:completed"), token: "admin", status: 400,
			want: []string{"requeue applies to failed"}, wantNot: []string{"bulk-confirm"}},
		{name: "bulk confirm by id", target: "/bulk?action=requeue&q=id:4", token: "admin", status: 400, want: []string{"act on one job"}},
		{name: "bulk confirm by payload", target: "/bulk?action=requeue&q=payload:x", token: "admin", status: 400, want: []string{"payload:, worker: and error: cannot choose"}},
		{name: "bulk confirm read only", target: "/bulk?action=requeue&q=", token: "read", status: 403},
		{name: "operation running", target: "/operations/55", token: "admin", status: 200,
			want: []string{`value="50"`, `hx-trigger="every 1s"`, `id="op-cancel"`, `id="op-processed">617<`, "&lt;script&gt;"}},
		{name: "operation fragment", target: "/operations/55", token: "read", status: 200, headers: []string{"HX-Request", "true"},
			want: []string{`<div id="operation"`}, wantNot: []string{"<html", "op-cancel"}},
		{name: "operation ended", target: "/operations/56", token: "read", status: 200,
			want: []string{`data-state="failed"`, "canceled by"}, wantNot: []string{"hx-trigger", "op-cancel"}},
		{name: "operation unknown", target: "/operations/57", token: "read", status: 404},
		{name: "operation bad id", target: "/operations/x", token: "read", status: 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := checkPage(t, tc.name, serve(c, "GET", tc.target, tc.token, nil, tc.headers...), tc.status)
			for _, s := range tc.want {
				if !strings.Contains(body, s) {
					t.Errorf("lacks %q\n%.4000s", s, body)
				}
			}
			for _, s := range tc.wantNot {
				if strings.Contains(body, s) {
					t.Errorf("has %q", s)
				}
			}
		})
	}
}

func quoted(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// TestOpsActions: the read scope's forged POSTs get 403 and change
// nothing; cross-origin ones too; admin's go through and redirect.
func TestOpsActions(t *testing.T) {
	t.Parallel()
	c, f := newConsole(t, true)
	forged := map[string]url.Values{
		"/workers/w2/drain":     {},
		"/workers/w2/undrain":   {},
		"/scheduled/4/run":      {},
		"/scheduled/4/cancel":   {},
		"/bulk":                 {"action": {"requeue"}, "q": {"state:failed"}},
		"/operations/55/cancel": {},
	}
	for target, form := range forged {
		checkPage(t, "forged "+target, serve(c, "POST", target, "read", form), http.StatusForbidden)
		checkPage(t, "cross-origin "+target, serve(c, "POST", target, "admin", form, "Origin", "http://evil.example"), http.StatusForbidden)
	}
	if len(f.drained)+len(f.undrained)+len(f.ran)+len(f.canceled)+len(f.bulk)+len(f.opCanceled) != 0 {
		t.Fatalf("refused POSTs acted: %v %v %v %v %v %v", f.drained, f.undrained, f.ran, f.canceled, f.bulk, f.opCanceled)
	}
	for target, want := range map[string]string{
		"/workers/w%201%2Fx/drain": "../../workers?done=drain",
		"/workers/gone/undrain":    "../../workers?done=undrain",
		"/scheduled/4/run":         "../../scheduled?done=run",
		"/scheduled/4/cancel":      "../../scheduled?done=canceled",
		"/operations/55/cancel":    "../../operations/55?done=cancel",
	} {
		w := serve(c, "POST", target, "admin", url.Values{})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != want {
			t.Errorf("POST %s: %d %q, want %q", target, w.Code, w.Header().Get("Location"), want)
		}
	}
	w := serve(c, "POST", "/bulk", "admin", url.Values{"action": {"requeue"}, "q": {`state:failed name:"a b" queue:mail`}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "./operations/55" {
		t.Errorf("bulk start: %d %q", w.Code, w.Header().Get("Location"))
	}
	if len(f.bulk) != 1 || f.bulk[0] != (wire.BulkRequest{Action: "requeue", Status: "failed", Name: "a b", Queue: "mail"}) {
		t.Errorf("bulk request %+v", f.bulk)
	}
	if len(f.undrained) != 1 || f.undrained[0] != "gone" {
		t.Errorf("undrained %v, want [gone]", f.undrained)
	}
	if len(f.drained) != 1 || f.drained[0] != "w 1/x" || len(f.ran) != 1 || len(f.canceled) != 1 || len(f.opCanceled) != 1 {
		t.Errorf("acted: %v %v %v %v", f.drained, f.ran, f.canceled, f.opCanceled)
	}
	checkPage(t, "run now conflict", serve(c, "POST", "/scheduled/1/run", "admin", url.Values{}), http.StatusConflict)
	checkPage(t, "drain unknown", serve(c, "POST", "/workers/nope/drain", "admin", url.Values{}), http.StatusNotFound)
	checkPage(t, "undrain unknown", serve(c, "POST", "/workers/nope/undrain", "admin", url.Values{}), http.StatusNotFound)
	checkPage(t, "bulk bad", serve(c, "POST", "/bulk", "admin", url.Values{"action": {"explode"}}), http.StatusBadRequest)
}
