package ui_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	redistest.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests passed: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// chromium is the browser the tests drive (Debian's package; make test
// installs it through deploy/local/prereqs.sh).
const chromium = "/usr/bin/chromium"

// hostile goes into job names, errors and payloads.
const hostile = `<script>alert("x")</script><img src=x onerror=alert(1)>`

// site is a submitter with auth on, seen by the browser through a proxy
// that adds the prefix /ops (the console's base path is /console, so the
// browser sees it at /ops/console/).
type site struct {
	t          *testing.T
	api        *httptest.Server // the submitter itself
	proxy      *httptest.Server
	db         *pgxpool.Pool
	admin      string // API keys
	read       string
	console    string // the console's root URL as the browser sees it
	failed     []string
	grouped    []string // dead jobs of one group: "timeout after <dur>"
	bulk       []string
	bigPayload string
	dbURL      string // for processes a test starts (browser_ops_test.go)
	prefix     string
}

func newSite(t *testing.T) *site {
	t.Helper()
	dbURL, prefix := pgtest.NewDatabase(t), redistest.Prefix(t)
	cfg := submitter.Config{DatabaseURL: dbURL, RedisURL: redistest.URL(), RedisPrefix: prefix,
		UIBasePath: "/console", Auth: auth.Config{APIKeys: true}}
	srv, err := submitter.New(t.Context(), cfg, slogFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	s := &site{t: t, api: httptest.NewServer(srv.Handler()), dbURL: dbURL, prefix: prefix}
	t.Cleanup(s.api.Close)
	target, _ := url.Parse(s.api.URL)
	s.proxy = httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, "/ops")
		pr.Out.URL.RawPath = ""
		pr.Out.Host = pr.In.Host // as proxies are told to: Origin checks compare with it
	}})
	t.Cleanup(s.proxy.Close)
	s.console = s.proxy.URL + "/ops/console/"
	if s.db, err = pgxpool.New(t.Context(), dbURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.db.Close)
	s.admin = s.key("ops", "admin")
	s.read = s.key("viewer", "read")
	return s
}

func (s *site) key(name string, scopes ...string) string {
	key, hash := auth.NewAPIKey()
	if _, err := s.db.Exec(s.t.Context(), `INSERT INTO api_keys (name, hash, scopes) VALUES ($1, $2, $3)`, name, hash, scopes); err != nil {
		s.t.Fatal(err)
	}
	return key
}

// call sends an API request with the admin key and decodes the answer.
func (s *site) call(method, path, body string, out any) {
	s.t.Helper()
	req, _ := http.NewRequestWithContext(s.t.Context(), method, s.api.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		s.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatal(err)
		}
	}
}

func (s *site) status(id string) string {
	var j wire.Job
	s.call("GET", "/jobs/"+id, "", &j)
	return j.Status
}

// seed makes 60 "bulk" jobs, 4 dead ones with hostile names, errors and
// three attempts each, 5 dead "grouped" jobs whose errors differ only in a
// duration (one dead-letter group), a job with a payload too large to show
// and one with deep JSON. The dead jobs are made as the fail path leaves
// them, error fingerprint included.
func (s *site) seed() {
	var batch []map[string]any
	for i := range 60 {
		batch = append(batch, map[string]any{"name": "bulk", "payload": map[string]int{"i": i}})
	}
	b, _ := json.Marshal(batch)
	var resp wire.BatchSubmitResponse
	s.call("POST", "/submit_jobs", string(b), &resp)
	for _, j := range resp.Jobs {
		s.bulk = append(s.bulk, j.JobID)
	}
	for i := range 4 {
		var r wire.SubmitResponse
		p, _ := json.Marshal(map[string]any{"name": hostile + strings.Repeat("n", 60), "queue": "mail",
			"payload": map[string]any{"to": hostile, "n": i, "deep": json.RawMessage(strings.Repeat("[", 40) + strings.Repeat("]", 40))}})
		s.call("POST", "/submit_job", string(p), &r)
		// Attempt 1 as recorded before migration 014; 2 and 3 with their
		// leases' tokens, starts and backoff.
		now := time.Now()
		errs, _ := json.Marshal([]map[string]any{
			{"attempt": 1, "error": hostile + " timeout", "reason": "timeout", "worker_id": "w1", "at": now.Add(-3 * time.Minute)},
			{"attempt": 2, "error": strings.Repeat("very long error ", 300), "reason": "job_error", "worker_id": "w2", "at": now.Add(-2 * time.Minute),
				"token": 5170129884260387110, "started": now.Add(-2*time.Minute - 1500*time.Millisecond), "extended": 1,
				"next_state": "retrying", "retry_at": now.Add(-2*time.Minute + 2*time.Second)},
			{"attempt": 3, "error": "permanent: " + hostile, "reason": "permanent", "worker_id": "w<b>3</b>", "at": now.Add(-time.Minute),
				"token": 2930117361820734201, "started": now.Add(-time.Minute - 800*time.Millisecond), "next_state": "failed"},
		})
		s.kill(r.JobID, "permanent: "+hostile, errs)
		if _, err := s.db.Exec(s.t.Context(), `UPDATE jobs SET created_at = now() - interval '4 minutes' WHERE id = $1`, r.JobID); err != nil {
			s.t.Fatal(err)
		}
		s.failed = append(s.failed, r.JobID)
	}
	for i := range 5 {
		var r wire.SubmitResponse
		s.call("POST", "/submit_job", fmt.Sprintf(`{"name":"grouped","payload":{"n":%d}}`, i), &r)
		s.kill(r.JobID, fmt.Sprintf("timeout after %ds\ngoroutine 1 [running]:", 10+i), nil)
		s.grouped = append(s.grouped, r.JobID)
	}
	var r wire.SubmitResponse
	s.call("POST", "/submit_job", `{"name":"big","payload":"`+strings.Repeat("B", 300<<10)+`"}`, &r)
	s.bigPayload = r.JobID
	// The last hour's rollup, as the leader coordinator writes it.
	if _, err := s.db.Exec(s.t.Context(), `INSERT INTO job_rollup (minute, name, completed, failed, started, start_p50_ms,
			start_p95_ms, queue_depth, oldest_pending_seconds)
		SELECT date_trunc('minute', now()) - i * interval '1 minute', n, 20 + (i * 7) % 13, i % 3, 25, 4 + i % 5, 30 + (i * 11) % 40,
			(i * 17) % 50, (i * 5) % 30
		FROM generate_series(1, 60) AS i, (VALUES (''), ('bulk')) AS t(n)`); err != nil {
		s.t.Fatal(err)
	}
}

// kill makes a job dead as the fail path leaves it: its error, history
// (nil: one attempt) and fingerprint.
func (s *site) kill(id, errText string, errs []byte) {
	s.t.Helper()
	if errs == nil {
		errs, _ = json.Marshal([]map[string]any{{"attempt": 1, "error": errText, "reason": "timeout", "worker_id": "w1", "at": time.Now()}})
	}
	if _, err := s.db.Exec(s.t.Context(), `UPDATE jobs SET status = 'failed', attempts = 3, finished_at = now(),
		dead_reason = 'permanent', errors = $2, last_error = $3, worker_id = 'w3', error_fingerprint = dts_error_fingerprint($3)
		WHERE id = $1`, id, errs, errText); err != nil {
		s.t.Fatal(err)
	}
}

// browser starts headless Chromium with a fresh profile and records
// console errors, exceptions, CSP reports and every URL it requests.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string
	urls     []string
}

// skipBrowserInShort skips a test that drives Chromium in -short mode.
// A browser test calls it first, before the site, fleet and rows it sets
// up for the browser: make test runs it, make test-short does not.
func skipBrowserInShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("drives Chromium: make test runs it, make test-short does not")
	}
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	skipBrowserInShort(t)
	if _, err := exec.LookPath(chromium); err != nil {
		t.Fatalf("%s is missing: run `bash deploy/local/prereqs.sh test` (as root) to install chromium", chromium)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		// Chromium puts its singleton socket in TMPDIR and does not remove it.
		chromedp.Env("TMPDIR=" + t.TempDir()),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.WithoutCancel(t.Context()), opts...)
	t.Cleanup(cancelAlloc)
	b := &browser{}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(b.listen))
	t.Cleanup(cancel)
	b.ctx = ctx
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	for _, err := range []error{
		call(ctx, cdplog.Enable, cdp.Empty{}),
		call(ctx, network.Enable, network.EnableParams{}),
		call(ctx, runtime.Enable, cdp.Empty{}),
	} {
		if err != nil {
			t.Fatalf("enable events: %v", err)
		}
	}
	return b
}

func call[P any](ctx context.Context, cmd cdp.Command[P, cdp.Empty], p P) error {
	_, err := chromedp.Call(ctx, cmd, p)
	return err
}

func (b *browser) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, fmt.Sprint(a.Value)+a.Description)
			}
			b.problems = append(b.problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " ")))
		}
	case *runtime.EventExceptionThrown:
		b.problems = append(b.problems, "exception: "+ev.ExceptionDetails.Text)
	case *cdplog.EventEntryAdded:
		e := ev.Entry
		// 401 and 403 answers are expected where the test forges requests,
		// the 404 where it opens the error page, the 400 where it sends a
		// payload that is not JSON.
		if e.Source == cdplog.EntrySourceNetwork && (strings.Contains(e.Text, "status of 403") || strings.Contains(e.Text, "status of 401") ||
			strings.HasSuffix(e.URL, "/console/nope") || strings.Contains(e.Text, "status of 400") && strings.HasSuffix(e.URL, "/requeue")) {
			return
		}
		if e.Level == cdplog.EntryLevelError || e.Level == cdplog.EntryLevelWarning || e.Source == cdplog.EntrySourceSecurity {
			b.problems = append(b.problems, fmt.Sprintf("log %s/%s: %s %s", e.Source, e.Level, e.Text, e.URL))
		}
	case *network.EventRequestWillBeSent:
		b.urls = append(b.urls, ev.Request.URL)
	}
}

func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// clickLive clicks sel in a part of the page that live updates replace
// (an htmx swap on sse:stats): when the node it found is swapped out
// before the click lands, it finds the new one and clicks that. (CI saw
// "Could not find node with given id" on the queues page's Pause.)
func clickLive(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		for i := 0; ; i++ {
			v, err := chromedp.Click(chromedp.CSS(sel))(ctx, tg)
			if err == nil || i == 4 || !strings.Contains(err.Error(), "Could not find node with given id") {
				return v, err
			}
		}
	}
}

func get[T any](t *testing.T, b *browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// waitJS waits until cond holds in the page, across page loads (the
// back button reloads the page: its context goes away mid-poll).
func (b *browser) waitJS(t *testing.T, what, cond string) {
	t.Helper()
	testwait.NoError(t, 30*time.Second, fmt.Sprintf("%s: %s", what, cond), func() error {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		if err == nil && !ok {
			err = errors.New("false")
		}
		return err
	})
}

// shot saves a screenshot of the page: into docs/ui with
// UPDATE_SCREENSHOTS=1 (make screenshots), else into a temporary dir.
func (b *browser) shot(t *testing.T, dir, name string) {
	t.Helper()
	png := get(t, b, "screenshot "+name, chromedp.CaptureScreenshot())
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (b *browser) login(t *testing.T, token string) {
	t.Helper()
	b.do(t, "log in", chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Click(chromedp.CSS(`form.login button`)),
		chromedp.WaitVisible(chromedp.CSS(`header.top .who`)))
}

func (b *browser) logout(t *testing.T) {
	t.Helper()
	b.do(t, "log out", chromedp.Click(chromedp.CSS(`header.top .who button`)), chromedp.WaitVisible(chromedp.CSS(`#token`)))
}

func count(t *testing.T, b *browser, sel string) int {
	t.Helper()
	return len(get(t, b, "count "+sel, chromedp.Nodes(chromedp.CSSAll(sel), chromedp.AtLeast(0))))
}

// text reads an element's text in one evaluation: live updates may
// replace the element between two steps of chromedp.Text.
func text(t *testing.T, b *browser, sel string) string {
	t.Helper()
	q, _ := json.Marshal(sel)
	b.waitJS(t, "an element "+sel, `document.querySelector(`+string(q)+`) !== null`)
	return get(t, b, "text of "+sel, chromedp.Evaluate[string](`document.querySelector(`+string(q)+`).innerText`))
}

// TestBrowser drives the console in Chromium through a proxy prefix, as a
// read-only user and as an admin, with JavaScript on and off.
func TestBrowser(t *testing.T) {
	skipBrowserInShort(t)
	t.Parallel()
	s := newSite(t)
	s.seed()
	shots := t.TempDir()
	if os.Getenv("UPDATE_SCREENSHOTS") != "" {
		shots = filepath.Join("..", "..", "docs", "ui")
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t)

	// A deep link while logged out: the login, then the page asked for.
	deep := s.console + "jobs?q=" + url.QueryEscape("queue:mail state:failed")
	b.do(t, "deep link", chromedp.Navigate(deep), chromedp.WaitVisible(chromedp.CSS(`#token`)))
	b.shot(t, shots, "login")
	b.axe(t, "login")

	// Read only: no action controls; a forged POST gets 403.
	b.login(t, s.read)
	if loc := get(t, b, "location", chromedp.Location()); loc != deep {
		t.Errorf("after login at %s, want the deep link %s", loc, deep)
	}
	if n := count(t, b, `#results tbody tr`); n != 4 {
		t.Errorf("queue:mail state:failed shows %d jobs, want 4", n)
	}
	b.do(t, "queues read only", chromedp.Navigate(s.console+"queues"), chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="default"]`)))
	if n := count(t, b, `main form[method="post"], main button`); n != 0 {
		t.Errorf("read only sees %d controls on Queues", n)
	}
	if st := get(t, b, "forged pause", chromedp.Evaluate[int](`fetch("queues/default/pause", {method: "POST", body: new URLSearchParams()}).then(r => r.status)`,
		chromedp.EvalAwaitPromise)); st != http.StatusForbidden {
		t.Errorf("read only's forged pause: %d, want 403", st)
	}
	b.do(t, "dlq read only", chromedp.Navigate(s.console+"dlq"), chromedp.WaitVisible(chromedp.CSS(`table.list`)))
	if n := count(t, b, `button, input[type=checkbox]`); n != 1 { // Log out only
		t.Errorf("read only sees %d buttons and checkboxes, want only Log out", n)
	}
	forged := get(t, b, "forged POST", chromedp.Evaluate[int](`fetch("dlq/`+s.failed[0]+`/requeue", {method: "POST", body: new URLSearchParams()}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if forged != http.StatusForbidden {
		t.Errorf("read only's forged POST: %d, want 403", forged)
	}
	b.logout(t)

	b.login(t, s.admin)

	// Overview: the counts are GET /stats's.
	b.do(t, "overview", chromedp.Navigate(s.console), chromedp.WaitVisible(chromedp.CSS(`#dlq-depth`)))
	var stats wire.StatsResponse
	s.call("GET", "/stats", "", &stats)
	for state, want := range stats.Jobs {
		if got := text(t, b, `td[data-state="`+state+`"]`); got != strconv.FormatInt(want, 10) {
			t.Errorf("overview %s = %s, /stats says %d", state, got, want)
		}
	}
	dlq := text(t, b, `#dlq-depth`)
	if dlq != strconv.FormatInt(stats.DLQDepth, 10) || dlq != "9" {
		t.Errorf("overview DLQ depth %s, /stats says %d", dlq, stats.DLQDepth)
	}
	if n := count(t, b, `#charts svg[role=img]`); n != 4 {
		t.Errorf("the overview draws %d charts, want 4", n)
	}
	if n := count(t, b, `#chart-throughput polyline`); n < 2 {
		t.Errorf("the throughput chart has %d lines, want completed and failed", n)
	}
	b.shot(t, shots, "overview")
	b.do(t, "scroll to the charts", chromedp.ScrollIntoView(chromedp.CSS(`#charts`)))
	b.shot(t, shots, "charts")
	b.axe(t, "overview")

	// Live: a job submitted over HTTP shows on the Overview, then on
	// Jobs, within 2 s and without a reload, with the refresh choice at
	// 1 s (at the default 2 s, a change that comes just after an event
	// waits 2 s for the next, and the bound was missed by a few ms).
	pending := text(t, b, `td[data-state="pending"]`)
	b.waitJS(t, "overview stream", `window.dtsLive && window.dtsLive.state() === "stream"`)
	get(t, b, "refresh 1 s", chromedp.Evaluate[bool](`(s => { s.value = "1"; return s.dispatchEvent(new Event("change")) })(document.getElementById("refresh"))`))
	get(t, b, "mark the page", chromedp.Evaluate[bool](`window.notReloaded = true`))
	b.waitJS(t, "overview stream", `window.dtsLive && window.dtsLive.state() === "stream"`)
	var fresh wire.SubmitResponse
	s.call("POST", "/submit_job", `{"name":"live"}`, &fresh)
	b.within(t, "the overview counts the new job", 2*time.Second,
		`window.notReloaded === true && document.querySelector('td[data-state="pending"]').textContent !== "`+pending+`"`)
	b.do(t, "jobs, live", chromedp.Navigate(s.console+"jobs"), chromedp.WaitVisible(chromedp.CSS(`#results`)))
	get(t, b, "mark the page", chromedp.Evaluate[bool](`window.notReloaded = true`))
	b.waitJS(t, "jobs stream", `window.dtsLive.state() === "stream"`)
	s.call("POST", "/submit_job", `{"name":"live"}`, &fresh)
	b.within(t, "the new job on Jobs", 2*time.Second, `window.notReloaded === true && document.querySelector('#results tr[data-job-id="`+fresh.JobID+`"]') !== null`)
	// The refresh choice: off holds no stream, and neither does a hidden tab.
	get(t, b, "refresh off", chromedp.Evaluate[bool](`(s => { s.value = "0"; return s.dispatchEvent(new Event("change")) })(document.getElementById("refresh"))`))
	b.waitJS(t, "no stream when off", `window.dtsLive.state() === "off"`)
	get(t, b, "refresh 1 s", chromedp.Evaluate[bool](`(s => { s.value = "1"; return s.dispatchEvent(new Event("change")) })(document.getElementById("refresh"))`))
	b.waitJS(t, "a stream again", `window.dtsLive.state() === "stream"`)
	get(t, b, "hide the tab", chromedp.Evaluate[bool](`Object.defineProperty(document, "hidden", {value: true, configurable: true});
		document.dispatchEvent(new Event("visibilitychange"))`))
	b.waitJS(t, "no stream while hidden", `window.dtsLive.state() === "hidden"`)
	get(t, b, "show the tab", chromedp.Evaluate[bool](`Object.defineProperty(document, "hidden", {value: false, configurable: true});
		document.dispatchEvent(new Event("visibilitychange"))`))
	b.waitJS(t, "a stream once shown", `window.dtsLive.state() === "stream"`)

	// Jobs: filter (an htmx swap that pushes the URL), the next page, back,
	// and the second page as a deep link.
	b.do(t, "jobs", chromedp.Navigate(s.console+"jobs"), chromedp.WaitVisible(chromedp.CSS(`#q`)),
		chromedp.SendKeys(chromedp.CSS(`#q`), "name:bulk"), chromedp.Click(chromedp.CSS(`form.search button`)))
	b.waitJS(t, "filtered", `location.search === "?q=name%3Abulk" && document.querySelectorAll("#results tbody tr").length === 50`)
	b.shot(t, shots, "jobs")
	b.axe(t, "jobs")
	first := s.bulk[len(s.bulk)-1]
	if n := count(t, b, `#results tr[data-job-id="`+first+`"]`); n != 1 {
		t.Errorf("the newest bulk job %s is not on the first page", first)
	}
	b.do(t, "older", chromedp.Click(chromedp.CSS(`#older`)))
	b.waitJS(t, "page 2", `location.search.includes("before=") && document.querySelectorAll("#results tbody tr").length === 10`)
	page2 := get(t, b, "location", chromedp.Location())
	if n := count(t, b, `#results tr[data-job-id="`+s.bulk[0]+`"]`); n != 1 {
		t.Errorf("the oldest bulk job is not on page 2")
	}
	b.do(t, "back", chromedp.NavigateBack())
	b.waitJS(t, "back on page 1", `location.search === "?q=name%3Abulk" && document.querySelectorAll("#results tbody tr").length === 50`)
	b.do(t, "deep link to page 2", chromedp.Navigate(page2), chromedp.WaitVisible(chromedp.CSS(`#results`)))
	if n := count(t, b, `#results tbody tr`); n != 10 {
		t.Errorf("page 2 by deep link shows %d jobs, want 10", n)
	}
	if q := get(t, b, "search box", chromedp.Value(chromedp.CSS(`#q`))); q != "name:bulk" {
		t.Errorf("the search box of the deep link holds %q", q)
	}

	// Job: every attempt; a large payload is a download.
	b.do(t, "job", chromedp.Navigate(s.console+"jobs/"+s.failed[0]), chromedp.WaitVisible(chromedp.CSS(`table.attempts`)))
	if n := count(t, b, `table.attempts tbody tr`); n != 3 {
		t.Errorf("the job shows %d attempts, want 3", n)
	}
	if n := count(t, b, `#requeue`); n != 1 {
		t.Errorf("admin sees no Requeue on a dead job")
	}
	// The shot shows the timeline and the attempts (the fields fill the
	// first screen).
	get(t, b, "scroll to the timeline", chromedp.Evaluate[bool](
		`window.scrollTo(0, document.querySelector("#timeline-heading").getBoundingClientRect().top + window.scrollY - 8), true`))
	b.shot(t, shots, "job")
	b.axe(t, "job")
	b.do(t, "big job", chromedp.Navigate(s.console+"jobs/"+s.bigPayload), chromedp.WaitVisible(chromedp.CSS(`#download-payload`)))

	// Dead letters: the groups first, the largest first, their text
	// inert; then select two jobs and requeue them. The refresh is off
	// from here, as in TestBrowserOps: a refresh could swap a row in
	// between chromedp's lookup of a checkbox and its click ("Could not
	// find node with given id").
	get(t, b, "refresh off", chromedp.Evaluate[bool](`localStorage.setItem("dts.console.refresh", "0"), true`))
	b.do(t, "dlq", chromedp.Navigate(s.console+"dlq"), chromedp.WaitVisible(chromedp.CSS(`#requeue-selected`)))
	if n := count(t, b, `table.groups tbody tr`); n != 2 {
		t.Errorf("%d groups shown, want 2", n)
	}
	g, n := text(t, b, `tr[data-group="0"] td:nth-child(2)`), strings.Fields(text(t, b, `tr[data-group="0"] td:nth-child(3)`))
	if g != "timeout after <dur>" || len(n) == 0 || n[0] != "5" {
		t.Errorf("the largest group shows %q, %q", g, n)
	}
	if g := text(t, b, `tr[data-group="1"] td:nth-child(2)`); !strings.Contains(g, `<script>alert(<str>)</script>`) {
		t.Errorf("the hostile group's fingerprint shows as %q", g)
	}
	b.shot(t, shots, "dlq")
	b.axe(t, "dlq")
	b.do(t, "requeue selected",
		chromedp.Click(chromedp.CSS(`input[value="`+s.failed[0]+`"]`)), chromedp.Click(chromedp.CSS(`input[value="`+s.failed[1]+`"]`)),
		chromedp.Click(chromedp.CSS(`#requeue-selected`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	msg := text(t, b, `.flash`)
	if msg != "2 jobs requeued." || s.status(s.failed[0]) != "pending" || s.status(s.failed[1]) != "pending" || s.status(s.failed[2]) != "failed" {
		t.Errorf("after requeueing two: %q, states %s %s %s", msg, s.status(s.failed[0]), s.status(s.failed[1]), s.status(s.failed[2]))
	}

	// A group: its jobs, then Requeue all of it (the all-matching
	// operation on its fingerprint), which requeues those 5 jobs and no
	// other.
	b.do(t, "a group's jobs", chromedp.Click(chromedp.CSS(`tr[data-group="0"] .group-jobs`)))
	b.waitJS(t, "the group's jobs", `location.pathname.endsWith("/jobs") && document.querySelectorAll("#results tbody tr").length === 5`)
	for _, id := range s.grouped {
		if n := count(t, b, `#results tr[data-job-id="`+id+`"]`); n != 1 {
			t.Errorf("the group's jobs lack %s", id)
		}
	}
	b.do(t, "requeue a group", chromedp.Navigate(s.console+"dlq"), chromedp.WaitVisible(chromedp.CSS(`tr[data-group="0"] .group-requeue`)),
		chromedp.Click(chromedp.CSS(`tr[data-group="0"] .group-requeue`)), chromedp.WaitVisible(chromedp.CSS(`#bulk-confirm`)))
	if n := text(t, b, `#bulk-matched`); n != "5" {
		t.Errorf("the group's confirmation counts %s jobs, want 5", n)
	}
	b.do(t, "confirm the group's requeue", chromedp.Click(chromedp.CSS(`#bulk-confirm`)), chromedp.WaitVisible(chromedp.CSS(`#op-progress`)))
	b.waitJS(t, "the group's operation ends", `document.querySelector("#operation").dataset.state === "done"`)
	if got := text(t, b, `#op-affected`); got != "5" {
		t.Errorf("the group's operation changed %s jobs, want 5", got)
	}
	for _, id := range s.grouped {
		if st := s.status(id); st != "pending" {
			t.Errorf("grouped job %s is %s after its group's requeue", id, st)
		}
	}
	if n := s.count(`SELECT count(*) FROM jobs WHERE status = 'failed'`); n != 2 {
		t.Errorf("%d dead jobs after the group's requeue, want the other group's 2", n)
	}
	s.wantAudit("job.bulk", "requeue")

	// Requeue with an edited payload, from the dead job's page: JSON that
	// does not parse is refused, with where, and changes nothing; then a
	// good one requeues the job with it.
	b.do(t, "edit a payload", chromedp.Navigate(s.console+"jobs/"+s.failed[3]), chromedp.WaitVisible(chromedp.CSS(`#edit-requeue`)),
		chromedp.Click(chromedp.CSS(`#edit-requeue`)), chromedp.WaitVisible(chromedp.CSS(`#payload`)))
	if v := get(t, b, "the payload", chromedp.Value(chromedp.CSS(`#payload`))); !strings.Contains(v, `"to": "<script>`) {
		t.Errorf("the form holds %q", v)
	}
	b.do(t, "send bad JSON", chromedp.SetValue(chromedp.CSS(`#payload`), "{\n  \"to\": "+hostile+"\n}"),
		chromedp.Click(chromedp.CSS(`#requeue-edited`)), chromedp.WaitVisible(chromedp.CSS(`#payload-error`)))
	if msg := text(t, b, `#payload-error`); !strings.Contains(msg, "payload: must be valid JSON") || !strings.Contains(msg, "line 2") {
		t.Errorf("bad JSON: %q", msg)
	}
	b.shot(t, shots, "requeue")
	b.axe(t, "requeue with a payload")
	if st := s.status(s.failed[3]); st != "failed" {
		t.Errorf("refused JSON changed the job: %s", st)
	}
	b.do(t, "send good JSON", chromedp.SetValue(chromedp.CSS(`#payload`), `{"to": "fixed@example.com"}`),
		chromedp.Click(chromedp.CSS(`#requeue-edited`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	if msg := text(t, b, `.flash`); msg != "1 job requeued with the edited payload." {
		t.Errorf("after the edited requeue: %q", msg)
	}
	var edited wire.Job
	s.call("GET", "/jobs/"+s.failed[3], "", &edited)
	if edited.Status != "pending" || string(edited.Payload) != `{"to":"fixed@example.com"}` {
		t.Errorf("after the edited requeue: %s %s", edited.Status, edited.Payload)
	}
	s.wantAudit("job.requeue", s.failed[3])
	s.kill(s.failed[3], "permanent: "+hostile, nil) // dead again, for the cross-origin check below

	// Queues: pause the default queue (the 60 bulk jobs wait in it) from
	// the page with JavaScript on, then resume it with JavaScript off;
	// both go through the API's service, audited with the admin's key.
	b.do(t, "queues", chromedp.Navigate(s.console+"queues"), chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="default"] button.pause`)))
	if got := text(t, b, `tr[data-queue="mail"] td[data-col="paused"]`); got != "no" {
		t.Errorf("queue mail shows paused %q", got)
	}
	b.axe(t, "queues")
	b.do(t, "pause", clickLive(`tr[data-queue="default"] button.pause`), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	if got := text(t, b, `tr[data-queue="default"] td[data-col="paused"]`); got != "paused" || count(t, b, `tr[data-queue="default"] button.resume`) != 1 {
		t.Errorf("after Pause the default queue shows paused %q", got)
	}
	if n := s.count(`SELECT count(*) FROM queues WHERE name = 'default' AND paused`); n != 1 {
		t.Errorf("after Pause, queues has %d paused rows for default", n)
	}
	s.wantAudit("queue.pause", "default")
	b.shot(t, shots, "queues")
	if err := call(b.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	b.do(t, "resume without javascript", chromedp.Navigate(s.console+"queues"),
		chromedp.WaitReady(chromedp.CSS(`tr[data-queue="default"] button.resume`)),
		chromedp.Click(chromedp.CSS(`tr[data-queue="default"] button.resume`)), chromedp.WaitReady(chromedp.CSS(`.flash`)))
	row := get(t, b, "the row without js", chromedp.OuterHTML(chromedp.CSS(`tr[data-queue="default"]`)))
	if err := call(b.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(row, `<td data-col="paused">no</td>`) || !strings.Contains(row, `button type="submit" class="pause`) {
		t.Errorf("after Resume without JavaScript the row is %s", row)
	}
	if n := s.count(`SELECT count(*) FROM queues WHERE name = 'default' AND paused`); n != 0 {
		t.Errorf("after Resume, default is still paused")
	}
	s.wantAudit("queue.resume", "default")

	b.do(t, "error page", chromedp.Navigate(s.console+"nope"), chromedp.WaitVisible(chromedp.CSS(`#error-message`)))
	b.axe(t, "error page")

	// With JavaScript off, requeue is a plain form POST.
	if err := call(b.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	b.do(t, "javascript off", chromedp.Navigate(s.console+"dlq"),
		chromedp.WaitReady(chromedp.CSS(`tr[data-job-id="`+s.failed[2]+`"] .requeue-one`)),
		chromedp.Click(chromedp.CSS(`tr[data-job-id="`+s.failed[2]+`"] .requeue-one`)), chromedp.WaitReady(chromedp.CSS(`.flash`)))
	html := get(t, b, "flash without js", chromedp.OuterHTML(chromedp.CSS(`.flash`)))
	if err := call(b.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html, "1 job requeued.") || s.status(s.failed[2]) != "pending" {
		t.Errorf("requeue without JavaScript: %q, state %s", html, s.status(s.failed[2]))
	}

	// A POST from another origin is refused, though the cookie goes along
	// (127.0.0.1 on another port is the same site, so SameSite lets it).
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id=f method=post action="%sdlq/%s/requeue"></form><script>document.getElementById("f").submit()</script>`, s.console, s.failed[3])
	}))
	t.Cleanup(evil.Close)
	b.do(t, "cross-origin POST", chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.CSS(`#error-message`)))
	msg = text(t, b, `#error-message`)
	if !strings.Contains(msg, "cross-origin") || s.status(s.failed[3]) != "failed" {
		t.Errorf("cross-origin POST: page says %q, job %s", msg, s.status(s.failed[3]))
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser: %s", p)
	}
	for _, u := range b.urls {
		if !strings.HasPrefix(u, s.proxy.URL+"/") && !strings.HasPrefix(u, evil.URL+"/") {
			t.Errorf("the browser asked another origin: %s", u)
		}
	}
	if !slices.ContainsFunc(b.urls, func(u string) bool { return strings.Contains(u, "/static/htmx-") }) {
		t.Errorf("htmx was never loaded")
	}
}

// wantAudit checks the newest audit entry is action on target by the
// admin's key.
func (s *site) wantAudit(action, target string) {
	s.t.Helper()
	var audit wire.AuditListResponse
	s.call("GET", "/admin/audit", "", &audit)
	if len(audit.Entries) == 0 || audit.Entries[0].Action != action || audit.Entries[0].TargetID != target ||
		!strings.HasPrefix(audit.Entries[0].Actor, "api_key:") {
		s.t.Errorf("newest audit entry %+v, want %s of %s by the admin key", audit.Entries, action, target)
	}
}

// within waits until cond holds in the page, failing if it takes longer
// than d.
func (b *browser) within(t *testing.T, what string, d time.Duration, cond string) {
	t.Helper()
	start := time.Now()
	b.waitJS(t, what, cond)
	if took := time.Since(start); took > d {
		t.Errorf("%s took %s, want at most %s", what, took.Round(time.Millisecond), d)
	}
}

// axe-core, vendored from npm for this test only (scripts/vendor-axe.sh):
// TestVendoredAxe checks it is that release, byte for byte.
const (
	axeVersion = "4.14.1"
	axeFile    = "testdata/axe-core-" + axeVersion + ".min.js"
	axeSHA256  = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"
)

// axe runs axe-core on the page and fails on every serious or critical
// violation.
func (b *browser) axe(t *testing.T, page string) {
	t.Helper()
	src, err := os.ReadFile(axeFile)
	if err != nil {
		t.Fatal(err)
	}
	if !get(t, b, "load axe-core", chromedp.Evaluate[bool](`(function () {`+string(src)+`; return typeof axe === "object"; })() || typeof window.axe === "object"`)) {
		t.Fatal("axe-core did not load")
	}
	bad := get(t, b, "axe on "+page, chromedp.Evaluate[[]string](`window.axe.run(document, {resultTypes: ["violations"]}).then(r =>
		r.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v =>
			v.impact + " " + v.id + ": " + v.help + " at " + v.nodes.slice(0, 3).map(n => n.target.join(" ")).join(", ")))`,
		chromedp.EvalAwaitPromise))
	for _, v := range bad {
		t.Errorf("axe on %s: %s", page, v)
	}
}

// TestVendoredAxe: the axe-core the browser test runs is the npm release
// axeVersion names.
func TestVendoredAxe(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(axeFile)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != axeSHA256 || !strings.HasPrefix(string(b), "/*! axe v"+axeVersion+"\n") {
		t.Errorf("%s: sha256 %s, want %s (axe v%s)", axeFile, got, axeSHA256, axeVersion)
	}
}

func slogFor(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}
