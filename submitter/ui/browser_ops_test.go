package ui_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/dtsched/dts/internal/childproc"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// startFleet builds the coordinator and worker binaries and starts one
// coordinator and the given workers (heartbeats every 200 ms) on the
// site's database and key prefix; they are killed when the test ends.
func startFleet(t *testing.T, s *site, workers ...string) {
	t.Helper()
	f := newFleet(t, s)
	for _, id := range workers {
		f.worker(id)
	}
}

// fleet starts the coordinator and worker binaries on a site's database
// and key prefix, and kills each when the test ends.
type fleet struct {
	t         *testing.T
	bin, logs string
	env       []string
}

// newFleet builds the binaries and starts the coordinator, with extra
// environment variables (BACKOFF_BASE=3s) after the common ones.
func newFleet(t *testing.T, s *site, coordinatorEnv ...string) *fleet {
	t.Helper()
	f := &fleet{t: t, bin: t.TempDir(), logs: t.TempDir(),
		env: []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + s.dbURL, "REDIS_URL=" + redistest.URL(), "REDIS_PREFIX=" + s.prefix,
			"HEARTBEAT_INTERVAL=200ms", "HEARTBEAT_MISSES=3", "POLL_INTERVAL=100ms", "ELECTION_INTERVAL=250ms", "LOG_LEVEL=info"}}
	for _, pkg := range []string{"coordinator/cmd/coordinator", "worker/cmd/worker"} {
		cmd := exec.Command("go", "build", "-ldflags=-w", "-o", f.bin+"/", "github.com/dtsched/dts/"+pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	f.start("coordinator", "coordinator", append([]string{"COORDINATOR_ID=c1", "COORDINATOR_ADDR=127.0.0.1:0"}, coordinatorEnv...)...)
	return f
}

// worker starts a worker of 4 slots, with extra environment variables.
func (f *fleet) worker(id string, env ...string) {
	f.t.Helper()
	f.start(id, "worker", append([]string{"WORKER_ID=" + id, "WORKER_ADDR=", "WORKER_CONCURRENCY=4"}, env...)...)
}

func (f *fleet) start(name, binary string, extra ...string) {
	t := f.t
	t.Helper()
	out, err := os.Create(filepath.Join(f.logs, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(f.bin, binary))
	cmd.Env = append(append([]string{}, f.env...), extra...)
	cmd.Stdout, cmd.Stderr = out, out
	p, err := childproc.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.Exited()
		out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("---- %s log ----\n%s", name, tail(string(b), 40))
		}
	})
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (s *site) count(sql string, args ...any) int {
	s.t.Helper()
	var n int
	if err := s.db.QueryRow(s.t.Context(), sql, args...).Scan(&n); err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestBrowserOps drives the operator pages against a real coordinator and
// workers: a worker drained from the Workers page gets no new jobs, and
// undrained there, it gets jobs again; run
// now on a scheduled job (JavaScript off); requeue of all the dead jobs a
// filter matches, with the count confirmed and the progress followed;
// and read only sees no controls.
func TestBrowserOps(t *testing.T) {
	const dead = 50_000
	skipBrowserInShort(t)
	t.Parallel()
	s := newSite(t)
	startFleet(t, s, "w-keep", "w-drain")
	shots := t.TempDir()
	if os.Getenv("UPDATE_SCREENSHOTS") != "" {
		shots = filepath.Join("..", "..", "docs", "ui")
	}
	// 50,000 dead jobs in queue "ops" (50 batches: long enough to watch),
	// named after no handler so that, requeued, they stay pending; and a
	// job an hour ahead.
	if _, err := s.db.Exec(t.Context(), `INSERT INTO jobs (name, queue, payload, status, attempts, max_retries, finished_at, dead_reason, last_error)
		SELECT 'report_' || (i % 3), 'ops', '1', 'failed', 4, 3, now(), 'permanent', $1 FROM generate_series(1, $2) i`, hostile, dead); err != nil {
		t.Fatal(err)
	}
	var later wire.SubmitResponse
	s.call("POST", "/submit_job", `{"name":"noop","delay_seconds":3600,"payload":{"say":"<script>x</script>"}}`, &later)
	s.call("POST", "/schedules", `{"name":"nightly <b>report</b>","cron":"0 30 2 * * *","time_zone":"Europe/Paris","job":{"name":"noop"}}`, nil)

	b := newBrowser(t)
	b.do(t, "login page", chromedp.Navigate(s.console+"workers"), chromedp.WaitVisible(chromedp.CSS(`#token`)))

	// Read only: the pages, and no control; a forged POST gets 403.
	b.login(t, s.read)
	testwait.For(t, 20*time.Second, "both workers recorded", func() bool { return s.count(`SELECT count(*) FROM workers WHERE state = 'available'`) == 2 })
	for _, page := range []string{"workers", "scheduled", "jobs?q=" + "state%3Afailed"} {
		b.do(t, "read only "+page, chromedp.Navigate(s.console+page), chromedp.WaitVisible(chromedp.CSS(`main h1`)))
		if n := count(t, b, `main form[method="post"] button, main .bulk-all, main input[type=checkbox]`); n != 0 {
			t.Errorf("read only sees %d controls on %s", n, page)
		}
	}
	for _, target := range []string{"workers/w-drain/drain", "scheduled/" + later.JobID + "/run", "bulk"} {
		status := get(t, b, "forged POST "+target, chromedp.Evaluate[int](`fetch("`+target+`", {method: "POST", body: new URLSearchParams("action=requeue&q=")}).then(r => r.status)`,
			chromedp.EvalAwaitPromise))
		if status != 403 {
			t.Errorf("read only's forged POST %s: %d", target, status)
		}
	}
	b.logout(t)
	b.login(t, s.admin)
	// The pages' own refresh (every 2 s by default) may swap a row in
	// between chromedp's lookup of a button and its click ("Could not find
	// node with given id"); a person's pointer on the button holds the swap
	// off, chromedp's does not. The clicks here are what this test checks,
	// so the refresh is off (TestBrowserPolish checks the refresh itself).
	get(t, b, "refresh off", chromedp.Evaluate[bool](`localStorage.setItem("dts.console.refresh", "0"), true`))

	// Workers: drain w-drain from its row.
	b.do(t, "workers", chromedp.Navigate(s.console+"workers"), chromedp.WaitVisible(chromedp.CSS(`tr[data-worker-id="w-drain"] summary.drain`)))
	if n := count(t, b, `tr[data-worker-id] summary.drain`); n != 2 {
		t.Errorf("%d Drain buttons, want 2", n)
	}
	b.shot(t, shots, "workers")
	b.axe(t, "workers")
	b.do(t, "drain", chromedp.Click(chromedp.CSS(`tr[data-worker-id="w-drain"] summary.drain`)),
		chromedp.Click(chromedp.CSS(`tr[data-worker-id="w-drain"] .drain-yes`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	if msg := text(t, b, `.flash`); !strings.HasPrefix(msg, "Drain requested") {
		t.Errorf("after drain: %q", msg)
	}
	testwait.For(t, 20*time.Second, "w-drain shown draining", func() bool {
		b.do(t, "reload workers", chromedp.Navigate(s.console+"workers"), chromedp.WaitVisible(chromedp.CSS(`tr[data-worker-id="w-drain"]`)))
		return text(t, b, `tr[data-worker-id="w-drain"] .wstate`) == "draining"
	})
	if n := count(t, b, `tr[data-worker-id="w-drain"] summary.drain`); n != 0 {
		t.Errorf("a drained worker still offers Drain")
	}
	// From now on every job goes to w-keep.
	batch := make([]map[string]any, 40)
	for i := range batch {
		batch[i] = map[string]any{"name": "noop", "payload": i}
	}
	body, _ := json.Marshal(batch)
	var sub wire.BatchSubmitResponse
	s.call("POST", "/submit_jobs", string(body), &sub)
	first, _ := strconv.ParseInt(sub.Jobs[0].JobID, 10, 64)
	testwait.For(t, 20*time.Second, "the 40 jobs to complete", func() bool {
		return s.count(`SELECT count(*) FROM jobs WHERE id >= $1 AND name = 'noop' AND status = 'completed'`, first) == 40
	})
	if n := s.count(`SELECT count(*) FROM jobs WHERE id >= $1 AND worker_id = 'w-drain'`, first); n != 0 {
		t.Errorf("the drained worker ran %d of the jobs submitted after its drain", n)
	}
	var audit wire.AuditListResponse
	s.call("GET", "/admin/audit", "", &audit)
	if len(audit.Entries) == 0 || audit.Entries[0].Action != "worker.drain" || audit.Entries[0].TargetID != "w-drain" ||
		!strings.HasPrefix(audit.Entries[0].Actor, "api_key:") {
		t.Errorf("newest audit entry %+v, want the drain by the admin key", audit.Entries[0])
	}
	// Undrain it from the same row: it takes jobs again.
	b.do(t, "workers again", chromedp.Navigate(s.console+"workers"), chromedp.WaitVisible(chromedp.CSS(`tr[data-worker-id="w-drain"] button.undrain`)))
	b.do(t, "undrain", chromedp.Click(chromedp.CSS(`tr[data-worker-id="w-drain"] button.undrain`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	if msg := text(t, b, `.flash`); !strings.HasPrefix(msg, "Drain withdrawn") {
		t.Errorf("after undrain: %q", msg)
	}
	testwait.For(t, 20*time.Second, "w-drain shown available with Drain", func() bool {
		b.do(t, "reload workers", chromedp.Navigate(s.console+"workers"), chromedp.WaitVisible(chromedp.CSS(`tr[data-worker-id="w-drain"]`)))
		return text(t, b, `tr[data-worker-id="w-drain"] .wstate`) == "available" && count(t, b, `tr[data-worker-id="w-drain"] summary.drain`) == 1
	})
	s.call("POST", "/submit_jobs", string(body), &sub)
	again, _ := strconv.ParseInt(sub.Jobs[0].JobID, 10, 64)
	testwait.For(t, 20*time.Second, "the undrained worker to run some of 40 more jobs", func() bool {
		return s.count(`SELECT count(*) FROM jobs WHERE id >= $1 AND worker_id = 'w-drain' AND status = 'completed'`, again) > 0
	})

	// Scheduled: run the job an hour ahead now, with JavaScript off.
	b.do(t, "scheduled", chromedp.Navigate(s.console+"scheduled"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-job-id="`+later.JobID+`"] button.run-now`)))
	if got := text(t, b, `table.schedules tbody tr td:nth-child(2)`); got != "nightly <b>report</b>" {
		t.Errorf("the schedule's name shows as %q", got)
	}
	b.shot(t, shots, "scheduled")
	b.axe(t, "scheduled")
	if err := call(b.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	b.do(t, "run now", chromedp.Click(chromedp.CSS(`tr[data-job-id="`+later.JobID+`"] button.run-now`)), chromedp.WaitReady(chromedp.CSS(`.flash`)))
	html := get(t, b, "flash", chromedp.OuterHTML(chromedp.CSS(`.flash`)))
	if err := call(b.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html, "The job is due now.") {
		t.Errorf("after run now: %s", html)
	}
	testwait.For(t, 20*time.Second, "the job run now to complete", func() bool { return s.status(later.JobID) == "completed" })

	// All matching: requeue every dead job of queue ops.
	b.do(t, "jobs filtered", chromedp.Navigate(s.console+"jobs?q="+"state%3Afailed%20queue%3Aops"), chromedp.WaitVisible(chromedp.CSS(`#bulk-review`)),
		chromedp.Click(chromedp.CSS(`#bulk-review`)), chromedp.WaitVisible(chromedp.CSS(`#bulk-confirm`)))
	if n := text(t, b, `#bulk-matched`); n != strconv.Itoa(dead) {
		t.Errorf("the confirmation shows %s jobs, want %d", n, dead)
	}
	b.shot(t, shots, "bulk")
	b.axe(t, "bulk confirmation")
	b.do(t, "confirm", chromedp.Click(chromedp.CSS(`#bulk-confirm`)), chromedp.WaitVisible(chromedp.CSS(`#op-progress`)))
	// The page shows the operation under way; htmx refreshes it until it ends.
	if st, v := text(t, b, `#op-state`), get(t, b, "progress", chromedp.Evaluate[float64](`document.querySelector("#op-progress").value`)); st != "running" || v >= 100 {
		t.Errorf("the operation page first shows %s at %v%%, want running below 100", st, v)
	}
	b.waitJS(t, "the operation ends", `document.querySelector("#operation").dataset.state === "done"`)
	b.shot(t, shots, "operation")
	b.axe(t, "operation")
	all := strconv.Itoa(dead)
	for sel, want := range map[string]string{`#op-matched`: all, `#op-processed`: all, `#op-affected`: all, `#op-state`: "done"} {
		if got := text(t, b, sel); got != want {
			t.Errorf("%s = %q, want %q", sel, got, want)
		}
	}
	if v := get(t, b, "progress", chromedp.Evaluate[float64](`document.querySelector("#op-progress").value`)); v != 100 {
		t.Errorf("progress %v, want 100", v)
	}
	if n := s.count(`SELECT count(*) FROM jobs WHERE queue = 'ops' AND status = 'pending' AND attempts = 0`); n != dead {
		t.Errorf("%d jobs of queue ops requeued, want %d", n, dead)
	}
	s.call("GET", "/admin/audit", "", &audit)
	if e := audit.Entries[0]; e.Action != "job.bulk" || !strings.Contains(string(e.Details), `"result": "done"`) &&
		!strings.Contains(string(e.Details), `"result":"done"`) {
		t.Errorf("newest audit entry %+v, want the bulk requeue, done", e)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser: %s", p)
	}
	for _, u := range b.urls {
		if !strings.HasPrefix(u, s.proxy.URL+"/") {
			t.Errorf("the browser asked another origin: %s", u)
		}
	}
}
