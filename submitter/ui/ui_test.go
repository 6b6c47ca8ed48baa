package ui

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

// hostile goes into every string a page shows.
const hostile = `<script>alert(1)</script>"'><img src=x onerror=alert(2)>`

// fakeService serves fixtures; the real one (package app) is driven
// by the browser tests against PostgreSQL.
type fakeService struct {
	mu       sync.Mutex
	jobs     map[int64]wire.Job
	stats    atomic.Int64
	calls    atomic.Int64 // every call, of every method
	pending  atomic.Int64 // the pending count Stats reports
	slow     atomic.Int64 // how long Stats takes, in nanoseconds
	rollup   []RollupRow
	requeued []int64
	lists    []ListParams
	// dlq_test.go's: the payloads jobs were requeued with (by id), and
	// the counts of the groups
	payloads map[int64]string
	groups   atomic.Int64
	slowDead atomic.Int64 // how long DeadGroups takes, in nanoseconds
	// ops_test.go's actions
	drained    []string
	undrained  []string
	ran        []int64
	canceled   []int64
	bulk       []wire.BulkRequest
	opCanceled []int64
	// queues_test.go's pauses and resumes: queue name to paused
	queueSet  map[string]bool
	queueActs []string
}

func newFake() *fakeService {
	long := strings.Repeat("x", 5000)
	deep := strings.Repeat("[", 900) + strings.Repeat("]", 900)
	big := `"` + strings.Repeat("b", maxInlineBytes+10) + `"`
	errText := hostile + long
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := &fakeService{jobs: map[int64]wire.Job{}}
	add := func(id int64, status string, payload string) {
		f.jobs[id] = wire.Job{JobID: itoa(id), Name: hostile + long[:100], Queue: "q.x:-_", Payload: json.RawMessage(payload),
			Status: status, Attempts: 2, MaxRetries: 1, LastError: &errText, WorkerID: &errText, CreatedAt: t0, NextRunAt: &t0,
			Errors: []wire.AttemptError{{Attempt: 1, Error: errText, Reason: "job_error", WorkerID: hostile, At: t0}}}
	}
	add(1, "failed", `{"html":"`+strings.ReplaceAll(hostile, `"`, `\"`)+`","n":[1,2,{"k":null}]}`)
	add(2, "failed", deep)
	add(3, "completed", big)
	add(4, "pending", `null`)
	return f
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func (f *fakeService) Stats(context.Context) (wire.StatsResponse, error) {
	time.Sleep(time.Duration(f.slow.Load()))
	f.stats.Add(1)
	f.calls.Add(1)
	return wire.StatsResponse{Jobs: map[string]int64{"pending": 1 + f.pending.Load(), "failed": 2, "completed": 1, "leased": 0, "retrying": 0, "canceled": 0},
		DLQDepth: 2, Workers: map[string]int64{"available": 1, "busy": 1, "unavailable": 3, "draining": 0},
		UnknownNames: map[string]int64{"send_emial": 12, hostile: 1}, UnknownNamesOther: 3,
		StarvedNames: map[string]float64{"zz_shout": 91.4}}, nil
}

func (f *fakeService) Leader(context.Context) (string, int64, error) {
	f.calls.Add(1)
	return hostile, 7, nil
}

func (f *fakeService) Queues(context.Context) (wire.QueueListResponse, error) {
	qs := []wire.QueueInfo{
		{Name: "reports", Paused: true, Concurrency: 4, Depth: 40, Pending: 41, OldestPendingSeconds: 612.4, CompletedPerMinute: 3},
		{Name: hostile, Depth: 1, Running: 2},
		{Name: "mail", Depth: 7, Pending: 7, CompletedPerMinute: 7, FailedPerMinute: 1},
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range qs {
		if p, ok := f.queueSet[qs[i].Name]; ok {
			qs[i].Paused = p
		}
	}
	return wire.QueueListResponse{Queues: qs}, nil
}

func (f *fakeService) Rollup(context.Context, time.Time) ([]RollupRow, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rollup, nil
}

func (f *fakeService) JobGet(_ context.Context, id int64) (wire.Job, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	if !ok {
		return wire.Job{}, job.ErrNotFound
	}
	return j, nil
}

// JobTimeline is the job's fixture with one timeline entry of every kind
// and attempts of every sort (ended with a token, running, from before
// tokens were recorded), hostile strings in each.
func (f *fakeService) JobTimeline(ctx context.Context, id int64) (wire.JobTimeline, error) {
	j, err := f.JobGet(ctx, id)
	if err != nil {
		return wire.JobTimeline{}, err
	}
	t0 := j.CreatedAt
	at := func(ms int) *time.Time { t := t0.Add(time.Duration(ms) * time.Millisecond); return &t }
	dur := int64(1250)
	key, reason := hostile, hostile
	return wire.JobTimeline{Job: j, IdempotencyKey: &key, DeadReason: &reason, LeaseExpiresAt: at(90_000), LeaseExtensions: 3,
		Attempts: []wire.Attempt{
			{Attempt: 1, WorkerID: j.Errors[0].WorkerID, EndedAt: at(500), Outcome: j.Errors[0].Reason, Error: j.Errors[0].Error},
			{Attempt: 2, WorkerID: "w2", LeaseToken: "1234567890123456789", StartedAt: at(1000), EndedAt: at(2250), DurationMS: &dur,
				LeaseExtensions: 2, Outcome: "error", Error: hostile + " boom", NextState: "retrying", RetryAt: at(4250)},
			{Attempt: 3, WorkerID: "w3", Running: true, StartedAt: at(5000), LeaseExpiresAt: at(90_000), LeaseExtensions: 3, Outcome: "running"},
		},
		Timeline: []wire.TimelineEntry{
			{At: t0, Kind: "submitted"},
			{At: *at(500), Kind: "failed", Attempt: 1, WorkerID: hostile, Reason: "timeout", Error: hostile},
			{At: *at(1000), Kind: "leased", Attempt: 2, WorkerID: "w2", LeaseToken: "1234567890123456789", LeaseExtensions: 2},
			{At: *at(2250), Kind: "failed", Attempt: 2, WorkerID: "w2", LeaseToken: "1234567890123456789", Reason: "error", Error: hostile + " boom"},
			{At: *at(2250), Kind: "backoff", Attempt: 2, Until: at(4250)},
			{At: *at(2500), Kind: "released", Attempt: 2, WorkerID: hostile, LeaseToken: "42"},
			{At: *at(3000), Kind: "stale_result", Attempt: 1, WorkerID: hostile, LeaseToken: "1234567890123456789", Outcome: hostile, OfAttempt: 2},
			{At: *at(3100), Kind: "stale_result", WorkerID: "w9", LeaseToken: "7", Outcome: "completed"},
			{At: *at(4000), Kind: "operator", Action: "job.requeue", Actor: hostile, Result: "ok"},
			{At: *at(5000), Kind: "leased", Attempt: 3, WorkerID: "w3", Running: true, Until: at(90_000), LeaseExtensions: 3},
			{At: *at(61_000), Kind: "dead", Attempt: 3, Reason: hostile},
			{At: *at(3_700_000), Kind: "canceled", Reason: "dependency_failed", Error: hostile},
			{At: *at(3_700_001), Kind: "completed", Attempt: 4, WorkerID: hostile, LeaseToken: "5"},
		}}, nil
}

// JobLogs: job 1 has two attempts' lines (one hostile) and dropped lines,
// more than the page shows; the other jobs have none.
func (f *fakeService) JobLogs(ctx context.Context, id int64, limit int64) (wire.JobLogs, error) {
	j, err := f.JobGet(ctx, id)
	if err != nil {
		return wire.JobLogs{}, err
	}
	out := wire.JobLogs{JobID: j.JobID, Lines: []wire.JobLogLine{}, Dropped: []wire.JobLogDropped{}}
	if id != 1 {
		return out, nil
	}
	t0 := j.CreatedAt
	out.Lines = []wire.JobLogLine{
		{Seq: 1, Attempt: 1, Time: t0.Add(300 * time.Millisecond), Level: "INFO", Message: "fetching report n=1"},
		{Seq: 2, Attempt: 2, Time: t0.Add(1500 * time.Millisecond), Level: "ERROR", Message: hostile},
	}
	out.Dropped = []wire.JobLogDropped{{Attempt: 2, Dropped: 17}}
	out.NextAfter, out.More = 2, limit <= int64(len(out.Lines))+1000
	return out, nil
}

func (f *fakeService) JobGetByKey(_ context.Context, key string) (wire.Job, error) {
	f.calls.Add(1)
	if key == "bad\x01" {
		return wire.Job{}, httpx.InvalidField("key", "no control characters")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if key != hostile {
		return wire.Job{}, job.ErrNotFound
	}
	return f.jobs[3], nil
}

// JobSearch finds text in the fixtures' payloads; "slow" stops at once,
// as a search out of time does, with where to go on.
func (f *fakeService) JobSearch(_ context.Context, p ListParams, scan Scan) (wire.JobListResponse, bool, error) {
	text := scan.Text
	f.calls.Add(1)
	if text == "slow" {
		c := "3"
		return wire.JobListResponse{NextCursor: &c}, true, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out wire.JobListResponse
	for id := int64(4); id >= 1; id-- {
		if j := f.jobs[id]; (p.Before == 0 || id < p.Before) && matches(j, p.State, p.Name, p.Queue) && strings.Contains(string(j.Payload), text) {
			out.Jobs = append(out.Jobs, j)
		}
	}
	return out, false, nil
}

func (f *fakeService) JobList(_ context.Context, p ListParams) (wire.JobListResponse, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists = append(f.lists, p)
	var out wire.JobListResponse
	for id := int64(4); id >= 1; id-- {
		if j := f.jobs[id]; (p.Before == 0 || id < p.Before) && matches(j, p.State, p.Name, p.Queue) {
			out.Jobs = append(out.Jobs, j)
		}
	}
	if len(out.Jobs) > 2 {
		out.Jobs = out.Jobs[:2]
		c := out.Jobs[1].JobID
		out.NextCursor = &c
	}
	return out, nil
}

func (f *fakeService) DeadList(context.Context, int, string) (wire.DLQResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out wire.DLQResponse
	for _, id := range []int64{1, 2} {
		out.Jobs = append(out.Jobs, wire.DLQJob{Job: f.jobs[id], Reason: hostile})
	}
	c := "123-1"
	out.NextCursor = &c
	return out, nil
}

// tokens is an Authenticator over fixed tokens.
type tokens map[string]auth.Principal

func (t tokens) Verify(_ context.Context, h string) (auth.Principal, error) {
	if p, ok := t[strings.TrimPrefix(h, "Bearer ")]; ok {
		return p, nil
	}
	return auth.Principal{}, &auth.Error{Reason: "unknown token"}
}

var testTokens = tokens{
	"admin": {Kind: auth.KindAPIKey, ID: "1", Name: hostile, Scopes: []string{auth.ScopeAdmin}},
	"read":  {Kind: auth.KindAPIKey, ID: "2", Name: "viewer", Scopes: []string{auth.ScopeRead}},
	"sub":   {Kind: auth.KindAPIKey, ID: "3", Name: "submitter", Scopes: []string{auth.ScopeSubmit}},
}

func newConsole(t *testing.T, authn bool) (*Console, *fakeService) {
	t.Helper()
	f := newFake()
	cfg := Config{}
	if authn {
		cfg.Authn = testTokens
	}
	c, err := New(f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, f
}

// get serves one request; token "" sends no cookie. Headers in pairs.
func serve(c *Console, method, target, token string, form url.Values, headers ...string) *httptest.ResponseRecorder {
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequest(method, target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		r.AddCookie(&http.Cookie{Name: cookieName, Value: token})
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	c.ServeHTTP(w, r)
	return w
}

var nonceAttr = regexp.MustCompile(`nonce="([^"]+)"`)

// checkPage: the security headers are there, the nonce of the page's tags
// is the CSP's, no hostile string came out unescaped, and the only scripts
// are the vendored htmx (and, on a page with live fragments, its SSE
// extension and live.js).
func checkPage(t *testing.T, name string, w *httptest.ResponseRecorder, wantStatus int) string {
	t.Helper()
	body := w.Body.String()
	if w.Code != wantStatus {
		t.Fatalf("%s: status %d, want %d\n%.2000s", name, w.Code, wantStatus, body)
	}
	h := w.Header()
	csp := h.Get("Content-Security-Policy")
	for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"} {
		if h.Get(k) != want {
			t.Errorf("%s: %s = %q, want %q", name, k, h.Get(k), want)
		}
	}
	if !strings.HasPrefix(csp, "default-src 'self';") || strings.Contains(csp, "unsafe") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("%s: CSP %q", name, csp)
	}
	if !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Errorf("%s: Content-Type %q", name, h.Get("Content-Type"))
	}
	for _, m := range nonceAttr.FindAllStringSubmatch(body, -1) {
		if !strings.Contains(csp, "'nonce-"+m[1]+"'") {
			t.Errorf("%s: nonce %q is not the CSP's: %s", name, m[1], csp)
		}
	}
	for _, bad := range []string{"<script>alert", "<img"} {
		if strings.Contains(body, bad) {
			t.Errorf("%s: %q came out unescaped", name, bad)
		}
	}
	if strings.Contains(body, "<html") {
		want := []string{HTMXFile, "page.js"}
		if strings.Contains(body, `sse-connect=`) {
			want = append(want, HTMXSSEFile, "live.js")
		}
		if n := strings.Count(body, "<script"); n != len(want) {
			t.Errorf("%s: %d script tags, want %v", name, n, want)
		}
		for _, f := range want {
			if !strings.Contains(body, `static/`+f+`" nonce=`) {
				t.Errorf("%s: no script tag of %s", name, f)
			}
		}
	}
	return body
}

// TestPagesRender renders every template with fixtures full of hostile
// strings, very long ones and deep JSON, as admin, read only and with
// auth off.
func TestPagesRender(t *testing.T) {
	t.Parallel()
	c, _ := newConsole(t, true)
	off, _ := newConsole(t, false)
	for _, tc := range []struct {
		name, target, token string
		authOff             bool
		status              int
		want, wantNot       []string
		headers             []string
	}{
		{name: "overview", target: "/", token: "admin", status: 200,
			want: []string{`data-state="failed">2<`, `id="dlq-depth">2<`, `id="workers">2 / 5<`, "epoch 7", "&lt;script&gt;", `href="./jobs?q=state%3Afailed"`,
				`<tr data-queue="reports"><td class="wrap ident"><a href="./jobs?q=queue%3Areports">reports</a></td><td><span class="state state-failed">paused</span></td><td class="n">4</td><td class="n">40</td><td class="n">41</td><td class="n nowrap" title="612 s">10m 12s</td>`,
				`href="./jobs?q=name%3Asend_emial&#43;state%3Apending">send_emial</a></td><td class="n" data-unhandled="send_emial">12</td>`,
				`<td class="muted">other names</td><td class="n">3</td>`,
				`href="./jobs?q=name%3Azz_shout&#43;state%3Apending">zz_shout</a></td><td class="n nowrap" data-starved="zz_shout" title="91 s">1m 31s</td>`}},
		{name: "overview read only", target: "/", token: "read", status: 200, want: []string{"read only", "Log out"}},
		{name: "overview auth off", target: "/", authOff: true, status: 200, wantNot: []string{"Log out"}},
		{name: "jobs", target: "/jobs", token: "admin", status: 200,
			want: []string{`data-job-id="4"`, `data-job-id="3"`, `id="older"`, `href="./jobs?q=&amp;before=3"`, "hx-push-url"}},
		{name: "jobs filtered", target: "/jobs?q=" + url.QueryEscape("state:failed name:"+strconv.Quote(hostile)), token: "read", status: 200,
			want: []string{"No jobs match."}},
		{name: "jobs bad query", target: "/jobs?q=" + url.QueryEscape("colour:red "+hostile), token: "read", status: 400,
			want: []string{"unknown qualifier"}},
		{name: "jobs by id", target: "/jobs?q=id:2", token: "read", status: 200, want: []string{`data-job-id="2"`}, wantNot: []string{`data-job-id="1"`}},
		{name: "jobs by key", target: "/jobs?q=" + url.QueryEscape("key:"+strconv.Quote(hostile)), token: "read", status: 200,
			want: []string{`data-job-id="3"`}, wantNot: []string{`data-job-id="4"`, "hx-trigger"}},
		{name: "jobs by key, other state", target: "/jobs?q=" + url.QueryEscape("state:failed key:"+strconv.Quote(hostile)), token: "read", status: 200,
			wantNot: []string{`data-job-id="3"`}},
		{name: "jobs by unknown key", target: "/jobs?q=key:nope", token: "read", status: 200, want: []string{"No jobs match."}, wantNot: []string{"data-job-id"}},
		{name: "payload search", target: "/jobs?q=" + url.QueryEscape(`payload:"\"n\":[1,2"`), token: "admin", status: 200,
			want: []string{`data-job-id="1"`}, wantNot: []string{`data-job-id="2"`, "search-stopped", "bulk-review", "hx-trigger"}},
		{name: "payload search stopped", target: "/jobs?q=" + url.QueryEscape("state:failed payload:slow"), token: "read", status: 200,
			want:    []string{`id="search-stopped"`, "stopped after 2 s", `href="./jobs?q=state%3Afailed&#43;payload%3Aslow&amp;before=3"`},
			wantNot: []string{"No jobs match", "data-job-id"}},
		{name: "payload with id", target: "/jobs?q=" + url.QueryEscape("id:1 payload:x"), token: "read", status: 400, want: []string{"does not go with id or key"}},
		{name: "jobs by bad key", target: "/jobs?q=" + url.QueryEscape("key:\"bad\\x01\""), token: "read", status: 400, want: []string{"no control characters"}},
		{name: "jobs fragment", target: "/jobs?q=state:failed", token: "read", status: 200, headers: []string{"HX-Request", "true"},
			want: []string{`<div id="results" hx-get="./jobs?q=state%3Afailed&amp;live=1" hx-trigger="sse:jobs"`}, wantNot: []string{"<html", "<form"}},
		{name: "jobs history restore", target: "/jobs", token: "read", status: 200,
			headers: []string{"HX-Request", "true", "HX-History-Restore-Request", "true"}, want: []string{"<html"}},
		{name: "job", target: "/jobs/1", token: "admin", status: 200,
			want: []string{`id="requeue"`, `action="../dlq/1/requeue"`, "&lt;script&gt;", `&#34;n&#34;: [`, "job_error", `src="../static/` + HTMXFile}},
		{name: "job read only", target: "/jobs/1", token: "read", status: 200, wantNot: []string{`id="requeue"`, "<button type=\"submit\" id"}},
		{name: "job timeline", target: "/jobs/1", token: "read", status: 200,
			want: []string{`<ol class="timeline" id="timeline" aria-labelledby="timeline-heading">`, `data-kind="submitted"`, `data-kind="released"`, `data-kind="operator"`,
				`data-kind="dead"`, `data-kind="canceled"`, `data-kind="completed"`,
				`<span class="rel nowrap" title="2026-01-02 03:04:07.250 UTC">&#43;2.25 s</span>`,
				"Retrying after a backoff of 2 s: due again at &#43;4.25 s",
				"Rejected a stale result (&lt;script&gt;", "the lease of attempt 2, which had ended", "no lease this job remembers",
				"Attempt 3 leased to <span class=\"wrap\">w3</span>; running, its lease runs to &#43;1 m 30 s, extended 3 times by heartbeats",
				"(lease extended 2 times)", "&#43;1 h 01 m", "handed back by", "(not counted)",
				`<td class="token">1234567890123456789</td>`, `<td class="token"><span class="muted">hidden while it runs</span></td>`,
				`<td class="n nowrap">1.25 s</td>`, "retry at &#43;4.25 s", "lease to &#43;1 m 30 s",
				`<tr data-outcome="job_error"><td class="n">1</td>`, "extended 3 times by heartbeats)"}},
		{name: "job logs", target: "/jobs/1", token: "read", status: 200,
			want: []string{`<table class="list logs" id="logs" aria-labelledby="logs-heading">`,
				`<tr data-level="INFO"><td class="n">1</td><td class="nowrap"><span title="2026-01-02 03:04:05.300 UTC">&#43;300 ms</span></td><td class="level-INFO">INFO</td><td class="wrap"><pre tabindex="0">fetching report n=1</pre></td></tr>`,
				`<td class="level-ERROR">ERROR</td><td class="wrap"><pre tabindex="0">&lt;script&gt;`,
				"Attempt 2: 17 older lines dropped", `id="logs-more"`, "dtsctl jobs logs 1"}},
		{name: "job without logs", target: "/jobs/2", token: "read", status: 200, want: []string{`id="logs-empty"`}, wantNot: []string{`id="logs"`}},
		{name: "job deep json", target: "/jobs/2", token: "read", status: 200, want: []string{"nested too deep to indent"}},
		{name: "job large payload", target: "/jobs/3", token: "read", status: 200,
			want: []string{`href="../jobs/3/payload"`, "too large to show here"}, wantNot: []string{"bbbbbbbbbbbbbbbbbbbbbbbbb"}},
		{name: "job unknown", target: "/jobs/99", token: "read", status: 404, want: []string{"error-message"}},
		{name: "job bad id", target: "/jobs/x1", token: "read", status: 400},
		{name: "dlq admin", target: "/dlq", token: "admin", status: 200,
			want: []string{`name="id" value="1"`, `formaction="./dlq/2/requeue"`, `id="requeue-selected"`, `href="./dlq?cursor=123-1"`}},
		{name: "dlq read only", target: "/dlq", token: "read", status: 200, wantNot: []string{"Requeue", "checkbox", "dlq/requeue"}},
		{name: "dlq flash", target: "/dlq?requeued=2&failed=1", token: "admin", status: 200, want: []string{"2 jobs requeued; 1 job could not be"}},
		{name: "login", target: "/login?next=" + url.QueryEscape("jobs?q=state%3Afailed"), status: 200,
			want: []string{`name="next" value="jobs?q=state%3Afailed"`, `type="password"`}},
		{name: "login bad next", target: "/login?next=" + url.QueryEscape("//evil.example/"), status: 200, want: []string{`name="next" value=""`}},
		{name: "not found", target: "/nope/" + url.PathEscape(hostile), token: "read", status: 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			con := c
			if tc.authOff {
				con = off
			}
			body := checkPage(t, tc.name, serve(con, "GET", tc.target, tc.token, nil, tc.headers...), tc.status)
			for _, s := range tc.want {
				if !strings.Contains(body, s) {
					t.Errorf("lacks %q\n%.3000s", s, body)
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

func TestLoginAndScopes(t *testing.T) {
	t.Parallel()
	c, f := newConsole(t, true)

	// Not logged in: pages send to the login, keeping the deep link.
	w := serve(c, "GET", "/jobs?q=state:failed", "", nil)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "./login?next="+url.QueryEscape("jobs?q=state:failed") {
		t.Errorf("anonymous page: %d %q", w.Code, w.Header().Get("Location"))
	}
	if w := serve(c, "GET", "/jobs/5", "bogus", nil); w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "../login?next=jobs%2F5") {
		t.Errorf("bad cookie: %d %q", w.Code, w.Header().Get("Location"))
	}

	// A bad token is refused; a token without read too.
	checkPage(t, "bad login", serve(c, "POST", "/login", "", url.Values{"token": {"nope"}}), http.StatusUnauthorized)
	checkPage(t, "submit-only login", serve(c, "POST", "/login", "", url.Values{"token": {"sub"}}), http.StatusForbidden)
	checkPage(t, "submit-only cookie", serve(c, "GET", "/", "sub", nil), http.StatusForbidden)

	// A good one sets the cookie and goes where the user was going.
	w = serve(c, "POST", "/login", "", url.Values{"token": {"read"}, "next": {"jobs?q=state%3Afailed"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "./jobs?q=state%3Afailed" {
		t.Fatalf("login: %d %q", w.Code, w.Header().Get("Location"))
	}
	ck := w.Result().Cookies()
	if len(ck) != 1 || ck[0].Value != "read" || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Secure {
		t.Errorf("cookie %+v", ck)
	}
	// Under TLS the cookie is Secure.
	r := httptest.NewRequest("POST", "/login", strings.NewReader("token=admin"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.TLS = &tls.ConnectionState{}
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, r)
	if ck := rec.Result().Cookies(); len(ck) != 1 || !ck[0].Secure {
		t.Errorf("cookie under TLS %+v", ck)
	}
	// A next outside the console is dropped.
	if w := serve(c, "POST", "/login", "", url.Values{"token": {"read"}, "next": {"https://evil.example/"}}); w.Header().Get("Location") != "./" {
		t.Errorf("next outside: %q", w.Header().Get("Location"))
	}

	// The read scope's forged POSTs get 403 and change nothing.
	for _, target := range []string{"/dlq/1/requeue", "/dlq/requeue"} {
		checkPage(t, "forged "+target, serve(c, "POST", target, "read", url.Values{"id": {"1"}}), http.StatusForbidden)
	}
	// No cookie: 401, not a redirect.
	checkPage(t, "anonymous POST", serve(c, "POST", "/dlq/requeue", "", url.Values{"id": {"1"}}), http.StatusUnauthorized)
	// Cross-origin POSTs are refused, even with an admin cookie.
	checkPage(t, "cross-site", serve(c, "POST", "/dlq/1/requeue", "admin", url.Values{}, "Sec-Fetch-Site", "cross-site"), http.StatusForbidden)
	checkPage(t, "other origin", serve(c, "POST", "/dlq/1/requeue", "admin", url.Values{}, "Origin", "http://evil.example"), http.StatusForbidden)
	if len(f.requeued) != 0 {
		t.Fatalf("requeued %v by refused requests", f.requeued)
	}

	// admin acts: one, from the job's page, then a selection.
	w = serve(c, "POST", "/dlq/1/requeue", "admin", url.Values{"from": {"job"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "../../jobs/1?requeued=1&failed=0" {
		t.Errorf("requeue one: %d %q", w.Code, w.Header().Get("Location"))
	}
	w = serve(c, "POST", "/dlq/requeue", "admin", url.Values{"id": {"2", "4", "2"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "../dlq?requeued=1&failed=1" {
		t.Errorf("requeue selected: %d %q", w.Code, w.Header().Get("Location"))
	}
	if got := f.requeued; len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("requeued %v, want [1 2]", got)
	}
	checkPage(t, "bad ids", serve(c, "POST", "/dlq/requeue", "admin", url.Values{"id": {"1", "x"}}), http.StatusBadRequest)

	// Logout clears the cookie.
	w = serve(c, "POST", "/logout", "admin", url.Values{})
	if ck := w.Result().Cookies(); w.Code != http.StatusSeeOther || len(ck) != 1 || ck[0].MaxAge >= 0 {
		t.Errorf("logout: %d %+v", w.Code, ck)
	}
}

func TestDownload(t *testing.T) {
	t.Parallel()
	c, _ := newConsole(t, false)
	w := serve(c, "GET", "/jobs/3/payload", "", nil)
	if w.Code != 200 || w.Header().Get("Content-Disposition") != `attachment; filename="job-3-payload.json"` ||
		w.Header().Get("Content-Type") != "application/json" || w.Body.Len() != maxInlineBytes+12 {
		t.Errorf("download: %d %v, %d bytes", w.Code, w.Header(), w.Body.Len())
	}
	if w := serve(c, "GET", "/jobs/3/other", "", nil); w.Code != 404 {
		t.Errorf("other part: %d", w.Code)
	}
}

// TestRootRedirect: the console's root without its slash goes to it,
// relatively.
func TestRootRedirect(t *testing.T) {
	t.Parallel()
	c, _ := newConsole(t, false)
	parent := chi.NewRouter()
	parent.Mount("/console", c)
	w := httptest.NewRecorder()
	parent.ServeHTTP(w, httptest.NewRequest("GET", "/console", nil))
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "console/" {
		t.Errorf("%d %q", w.Code, w.Header().Get("Location"))
	}
}

// TestSnapshotShared: concurrent viewers share one read of the
// refresher; the next read comes once the interval has passed.
func TestSnapshotShared(t *testing.T) {
	t.Parallel()
	f := newFake()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	s := newRefresher(f, time.Hour, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	t.Cleanup(s.close)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := s.get(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := f.stats.Load(); n != 1 {
		t.Errorf("20 viewers made %d reads, want 1", n)
	}
	// Past the interval the snapshot is only old: the next viewer wakes
	// the loop and waits at most agedWait for its read, then shows the old
	// one. A read slower than that (a loaded machine, a large table) must
	// still come, and only one.
	f.slow.Store(int64(4 * agedWait))
	mu.Lock()
	now = now.Add(3 * time.Hour)
	mu.Unlock()
	_, fresh := s.latest()
	if _, err := s.get(t.Context()); err != nil {
		t.Fatalf("after the interval: %v", err)
	}
	select {
	case <-fresh:
	case <-time.After(10 * time.Second):
		t.Fatal("the viewer past the interval woke no read")
	}
	if n := f.stats.Load(); n != 2 {
		t.Errorf("after the interval: %d reads, want 2", n)
	}
}

func TestParseQuery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    ListParams
		id      int64
		key     string
		scan    Scan
		wantErr string
	}{
		{in: "", want: ListParams{}},
		{in: "  state:failed   name:send_email queue:mail.x ", want: ListParams{State: job.StateFailed, Name: "send_email", Queue: "mail.x"}},
		{in: `status:pending name:"send email \"now\""`, want: ListParams{State: job.StatePending, Name: `send email "now"`}},
		{in: "report", want: ListParams{Name: "report"}},
		{in: "id:42 state:failed", want: ListParams{State: job.StateFailed}, id: 42},
		{in: `key:"order 7/<b>" queue:mail`, want: ListParams{Queue: "mail"}, key: "order 7/<b>"},
		{in: "key:a key:b", wantErr: "key: given twice"},
		{in: `payload:"a b" queue:q`, want: ListParams{Queue: "q"}, scan: Scan{Text: "a b"}},
		{in: "payload:x key:k", wantErr: "does not go with"},
		{in: `Payload.User.ID:42 WORKER:w-1 error:"Connection refused"`,
			scan: Scan{Path: []string{"User", "ID"}, PathValue: "42", Worker: "w-1", Error: "Connection refused"}},
		{in: `payload.tags.0:"a b" payload:x`, scan: Scan{Text: "x", Path: []string{"tags", "0"}, PathValue: "a b"}},
		{in: "payload.a:1 payload.b:2", wantErr: "payload.<path>: given twice"},
		{in: "worker:w1 id:3", wantErr: "does not go with"},
		{in: "error:x error:y", wantErr: "error: given twice"},
		{in: "STATE:failed", want: ListParams{State: job.StateFailed}},
		{in: "state:dead", wantErr: "state: must be one of"},
		{in: "id:-1", wantErr: "id: must be a job id"},
		{in: "name:a name:b", wantErr: "name: given twice"},
		{in: `name:"open`, wantErr: "unclosed quote"},
		{in: "colour:red", wantErr: `unknown qualifier "colour"`},
		{in: "name:", wantErr: "name: no value"},
		{in: strings.Repeat("a", maxQueryLen+1), wantErr: "longer than"},
	} {
		se, err := parseQuery(tc.in)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.wantErr)
			}
		case err != nil || se.P != tc.want || se.ID != tc.id || se.Key != tc.key || !reflect.DeepEqual(se.Scan, tc.scan):
			t.Errorf("%q = %+v err %v, want %+v id %d key %q", tc.in, se, err, tc.want, tc.id, tc.key)
		}
	}
}

// TestVendoredScripts: the embedded htmx and its SSE extension are the
// npm releases named by HTMXVersion and HTMXSSEVersion, byte for byte
// (scripts/vendor-htmx.sh fetches them), and nothing else is vendored.
func TestVendoredScripts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ file, version, sha256, marker string }{
		{HTMXFile, "2.0.11", "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717", `version:"2.0.11"`},
		{HTMXSSEFile, "2.2.4", "98a46496de0c3605fbffdce9167ba427bdd9553184f83f149c261891a92c0136", `htmx.defineExtension("sse"`},
	} {
		b, err := fs.ReadFile(staticFS, "static/"+tc.file)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != tc.sha256 {
			t.Errorf("%s: sha256 %s, want %s", tc.file, got, tc.sha256)
		}
		if !strings.Contains(tc.file, tc.version) || !strings.Contains(string(b), tc.marker) {
			t.Errorf("%s: not version %s", tc.file, tc.version)
		}
	}
	if HTMXVersion != "2.0.11" || HTMXSSEVersion != "2.2.4" {
		t.Errorf("versions %s, %s: update this test with the new sums", HTMXVersion, HTMXSSEVersion)
	}
	entries, _ := fs.ReadDir(staticFS, "static")
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".js") && e.Name() != HTMXFile && e.Name() != HTMXSSEFile && e.Name() != "live.js" && e.Name() != "page.js" { // live.js, page.js: the console's own
			t.Errorf("static/%s: an unchecked script", e.Name())
		}
	}
}

// TestSearchSuggestions: the Jobs page's search box completes queue: and
// name: from the shared snapshot (queues, the rollup's names), quoted when
// needed and escaped; a fragment request carries none.
func TestSearchSuggestions(t *testing.T) {
	t.Parallel()
	c, f := newConsole(t, true)
	f.mu.Lock()
	f.rollup = []RollupRow{{Name: ""}, {Name: "send_email"}, {Name: "nightly report"}, {Name: "send_email"}}
	f.mu.Unlock()
	if w := serve(c, "GET", "/", "read", nil); w.Code != http.StatusOK { // the snapshot is read
		t.Fatalf("overview: %d", w.Code)
	}
	w := serve(c, "GET", "/jobs", "read", nil)
	body := w.Body.String()
	for _, want := range []string{`list="q-suggest"`, `<option value="queue:reports">`, `<option value="name:send_email">`,
		`<option value="name:&#34;nightly report&#34;">`, `<option value="queue:&#34;&lt;script&gt;`} {
		if !strings.Contains(body, want) {
			t.Errorf("jobs page lacks %s", want)
		}
	}
	if n := strings.Count(body, `value="name:send_email"`); n != 1 {
		t.Errorf("send_email suggested %d times, want once", n)
	}
	if strings.Contains(body, "<script>alert") {
		t.Error("a hostile queue name is not escaped")
	}
	if w := serve(c, "GET", "/jobs", "read", nil, "HX-Request", "true"); strings.Contains(w.Body.String(), "q-suggest") {
		t.Error("a fragment carries the suggestions")
	}
}

// TestLoginFailureLimit: the console shares the API's budget of failed
// authentications per address, and, like the API, limits only failures.
// A user behind the same proxy or NAT as a guesser still logs in, and a
// logged-in user's cookie keeps working; forged cookies are charged like
// bad logins, so they are no way around the budget.
func TestLoginFailureLimit(t *testing.T) {
	t.Parallel()
	const burst = 20
	newLimited := func(t *testing.T) (*Console, *httpx.RateLimiter) {
		failures := httpx.NewRateLimiter(1e-6, burst, nil) // no refill within the test
		c, err := New(newFake(), Config{Authn: testTokens, Failures: failures})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c, failures
	}

	t.Run("login", func(t *testing.T) {
		t.Parallel()
		c, _ := newLimited(t)
		for i := range burst {
			checkPage(t, "bad login "+strconv.Itoa(i), serve(c, "POST", "/login", "", url.Values{"token": {"guess" + strconv.Itoa(i)}}), http.StatusUnauthorized)
		}
		w := serve(c, "POST", "/login", "", url.Values{"token": {"guess"}})
		checkPage(t, "bad login over the budget", w, http.StatusTooManyRequests)
		if w.Header().Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
		for i := range 3 {
			w := serve(c, "POST", "/login", "", url.Values{"token": {"read"}, "next": {"jobs"}})
			if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "./jobs" || len(w.Result().Cookies()) != 1 {
				t.Fatalf("good login %d from an address out of failures: %d %q, want 303 to ./jobs with the cookie", i, w.Code, w.Header().Get("Location"))
			}
		}
		checkPage(t, "submit-only login out of failures", serve(c, "POST", "/login", "", url.Values{"token": {"sub"}}), http.StatusForbidden)
	})

	t.Run("cookie", func(t *testing.T) {
		t.Parallel()
		c, failures := newLimited(t)
		for i := range burst {
			w := serve(c, "GET", "/jobs", "forged"+strconv.Itoa(i), nil)
			if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "./login") {
				t.Fatalf("forged cookie %d: %d %q, want the login", i, w.Code, w.Header().Get("Location"))
			}
		}
		if _, blocked := failures.Blocked("fail:192.0.2.1"); !blocked {
			t.Fatalf("%d forged cookies were not charged to the address's failures", burst)
		}
		for _, target := range []string{"GET /jobs", "POST /dlq/requeue"} {
			m, path, _ := strings.Cut(target, " ")
			w := serve(c, m, path, "forged", url.Values{"id": {"1"}})
			checkPage(t, target+" with a forged cookie over the budget", w, http.StatusTooManyRequests)
			if w.Header().Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
		}
		// And the login form is out of failures too: one budget.
		checkPage(t, "bad login after forged cookies", serve(c, "POST", "/login", "", url.Values{"token": {"guess"}}), http.StatusTooManyRequests)
		// A good cookie from the same address is served, again and again.
		for i := range 3 {
			checkPage(t, "good cookie "+strconv.Itoa(i), serve(c, "GET", "/jobs", "read", nil), http.StatusOK)
		}
		// No cookie is no failure: it is sent to the login.
		if w := serve(c, "GET", "/jobs", "", nil); w.Code != http.StatusSeeOther {
			t.Errorf("no cookie: %d, want 303 to the login", w.Code)
		}
	})
}
