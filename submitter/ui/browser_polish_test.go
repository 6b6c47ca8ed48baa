package ui_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/dtsched/dts/internal/wire"
)

// oneLine says, in the page, whether the text of the element sel is laid
// out on one line (no identifier broken mid-word).
func oneLine(sel string) string {
	q, _ := json.Marshal(sel)
	return `(e => { const r = document.createRange(); r.selectNodeContents(e); return new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top))).size === 1 })(document.querySelector(` + string(q) + `))`
}

// TestBrowserPolish drives the console's rough edges of issue 26: a Job
// page that follows its job (and its handler's log lines) without a reload, refresh on the pages of
// changing data, confirmations before cancel, delete and drain, select all
// and the action bar on top of Dead letters, state counts beside Jobs,
// human durations with the exact time on hover, an idle queue holding
// dead jobs listed, identifiers not broken mid-word, the phone layout at
// 375 px, and axe in the light and the dark theme.
func TestBrowserPolish(t *testing.T) {
	skipBrowserInShort(t)
	t.Parallel()
	s := newSite(t)
	var run, idle, done, sched wire.SubmitResponse
	s.call("POST", "/submit_job", `{"name":"test_job","queue":"default"}`, &run)
	s.call("POST", "/submit_job", `{"name":"test_job","queue":"idle_q"}`, &idle)
	s.kill(idle.JobID, "boom", nil)
	if _, err := s.db.Exec(t.Context(), `UPDATE jobs SET finished_at = now() - interval '2 hours' WHERE id = $1`, idle.JobID); err != nil {
		t.Fatal(err)
	}
	s.call("POST", "/submit_job", `{"name":"test_job"}`, &done)
	if _, err := s.db.Exec(t.Context(), `UPDATE jobs SET status = 'completed', finished_at = now(), created_at = now() - interval '200 seconds' WHERE id = $1`, done.JobID); err != nil {
		t.Fatal(err)
	}
	s.call("POST", "/submit_job", `{"name":"test_job","delay_seconds":7200}`, &sched)
	if _, err := s.db.Exec(t.Context(), `INSERT INTO workers (id, state, job_types, concurrency, in_flight, last_heartbeat_at)
		VALUES ('worker-1', 'available', '{test_job}', 4, 0, now() - interval '3 seconds')`); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t)
	b.do(t, "login page", chromedp.Navigate(s.console+"jobs/"+run.JobID), chromedp.WaitVisible(chromedp.CSS(`#token`)))
	b.login(t, s.admin)
	get(t, b, "refresh every second", chromedp.Evaluate[bool](`localStorage.setItem("dts.console.refresh", "1"), true`))

	// The Job page follows the job without a reload: leased, then
	// completed, with its attempt on the timeline.
	b.do(t, "job", chromedp.Navigate(s.console+"jobs/"+run.JobID), chromedp.WaitVisible(chromedp.CSS(`#job-status`)))
	get(t, b, "mark the page", chromedp.Evaluate[bool](`window.notReloaded = true`))
	if _, err := s.db.Exec(t.Context(), `UPDATE jobs SET status = 'leased', attempts = 1, worker_id = 'worker-1', lease_token = 7,
		started_at = now(), lease_expires_at = now() + interval '1 minute' WHERE id = $1`, run.JobID); err != nil {
		t.Fatal(err)
	}
	b.within(t, "the Job page shows the lease", 3*time.Second, `window.notReloaded === true && document.querySelector("#job-status").textContent === "leased" && document.querySelector("#job-attempts").textContent.startsWith("1")`)
	// A line the handler logged, as the leader stores it, shows while the
	// attempt runs.
	if _, err := s.db.Exec(t.Context(), `INSERT INTO job_logs (job_id, attempt, at, level, message) VALUES ($1, 1, now(), 'INFO', 'rendering page 3 of 9')`, run.JobID); err != nil {
		t.Fatal(err)
	}
	b.within(t, "the Job page shows the handler's log line", 3*time.Second, `window.notReloaded === true && document.querySelector("#logs tr[data-level=INFO]") !== null && document.querySelector("#logs").textContent.includes("rendering page 3 of 9")`)
	if _, err := s.db.Exec(t.Context(), `UPDATE jobs SET status = 'completed', lease_token = NULL, lease_expires_at = NULL, last_lease_token = 7,
		finished_at = now() WHERE id = $1`, run.JobID); err != nil {
		t.Fatal(err)
	}
	b.within(t, "the Job page shows the completion", 3*time.Second, `window.notReloaded === true && document.querySelector("#job-status").textContent === "completed" && document.querySelector('#timeline li[data-kind="completed"]') !== null`)
	if n := count(t, b, `#cancel-job`); n != 0 {
		t.Errorf("a completed job offers Cancel")
	}

	// Delete from the Job page asks first.
	b.do(t, "done job", chromedp.Navigate(s.console+"jobs/"+done.JobID), chromedp.WaitVisible(chromedp.CSS(`#delete-job summary`)))
	if title := get(t, b, "created title", chromedp.Evaluate[string](`document.querySelector("#created").title`)); !strings.HasSuffix(title, " UTC") {
		t.Errorf("created's title is %q, want the exact time", title)
	}
	if got := text(t, b, `#created`); !strings.HasPrefix(got, "3m ") || !strings.HasSuffix(got, "s ago") {
		t.Errorf("created shows %q, want about 3m 20s ago", got)
	}
	if visible := get(t, b, "confirm hidden", chromedp.Evaluate[bool](`document.querySelector("#delete-job").open || document.querySelector("#delete-confirm").checkVisibility()`)); visible {
		t.Errorf("Delete's confirmation shows before Delete is clicked")
	}
	b.do(t, "delete", chromedp.Click(chromedp.CSS(`#delete-job summary`)), chromedp.WaitVisible(chromedp.CSS(`#delete-confirm`)))
	b.axe(t, "job with a confirmation open")
	b.do(t, "confirm delete", chromedp.Click(chromedp.CSS(`#delete-confirm`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	if msg := text(t, b, `.flash`); msg != "The job was deleted." || s.count(`SELECT count(*) FROM jobs WHERE id = $1`, done.JobID) != 0 {
		t.Errorf("after delete: %q", msg)
	}

	// Cancel from the Job page asks first.
	b.do(t, "scheduled job", chromedp.Navigate(s.console+"jobs/"+sched.JobID), chromedp.WaitVisible(chromedp.CSS(`#cancel-job summary`)),
		chromedp.Click(chromedp.CSS(`#cancel-job summary`)), chromedp.WaitVisible(chromedp.CSS(`#cancel-confirm`)))
	if st := s.status(sched.JobID); st != "pending" {
		t.Errorf("opening Cancel changed the job: %s", st)
	}
	b.do(t, "confirm cancel", chromedp.Click(chromedp.CSS(`#cancel-confirm`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	if st := s.status(sched.JobID); st != "canceled" {
		t.Errorf("after Cancel's confirmation the job is %s", st)
	}

	// Scheduled: Cancel asks first too; the page refreshes itself.
	var later wire.SubmitResponse
	s.call("POST", "/submit_job", `{"name":"test_job","delay_seconds":3600}`, &later)
	b.do(t, "scheduled", chromedp.Navigate(s.console+"scheduled"), chromedp.WaitVisible(chromedp.CSS(`tr[data-job-id="`+later.JobID+`"] summary.cancel`)))
	b.waitJS(t, "scheduled refreshes", `window.dtsRefresh && window.dtsRefresh.rounds() > 0`)
	b.do(t, "cancel scheduled", chromedp.Click(chromedp.CSS(`tr[data-job-id="`+later.JobID+`"] summary.cancel`)))
	if st := s.status(later.JobID); st != "pending" {
		t.Errorf("one click on Cancel changed the job: %s", st)
	}
	b.do(t, "confirm", chromedp.Click(chromedp.CSS(`tr[data-job-id="`+later.JobID+`"] .cancel-yes`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	if st := s.status(later.JobID); st != "canceled" {
		t.Errorf("after Cancel's confirmation on Scheduled the job is %s", st)
	}

	// Workers: heartbeat ages move; Drain asks first.
	b.do(t, "workers", chromedp.Navigate(s.console+"workers"), chromedp.WaitVisible(chromedp.CSS(`tr[data-worker-id="worker-1"] summary.drain`)))
	first := text(t, b, `tr[data-worker-id="worker-1"] td[data-col="heartbeat"]`)
	b.waitJS(t, "the heartbeat age moves", `document.querySelector('tr[data-worker-id="worker-1"] td[data-col="heartbeat"]').textContent !== "`+first+`"`)
	if !get(t, b, "worker id on one line", chromedp.Evaluate[bool](oneLine(`tr[data-worker-id="worker-1"] td`))) {
		t.Errorf("worker-1 is broken across lines")
	}
	b.do(t, "drain", chromedp.Click(chromedp.CSS(`tr[data-worker-id="worker-1"] summary.drain`)))
	if n := s.count(`SELECT count(*) FROM workers WHERE drain_requested_at IS NOT NULL`); n != 0 {
		t.Errorf("one click on Drain drained the worker")
	}
	b.do(t, "confirm drain", chromedp.Click(chromedp.CSS(`tr[data-worker-id="worker-1"] .drain-yes`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	if n := s.count(`SELECT count(*) FROM workers WHERE drain_requested_at IS NOT NULL`); n != 1 {
		t.Errorf("after Drain's confirmation no worker is asked to drain")
	}
	b.do(t, "undrain", chromedp.WaitVisible(chromedp.CSS(`tr[data-worker-id="worker-1"] button.undrain`)),
		chromedp.Click(chromedp.CSS(`tr[data-worker-id="worker-1"] button.undrain`)))
	b.waitJS(t, "undrained", `document.querySelector(".flash") !== null && document.querySelector(".flash").textContent.startsWith("Drain withdrawn")`)
	if n := s.count(`SELECT count(*) FROM workers WHERE drain_requested_at IS NOT NULL`); n != 0 {
		t.Errorf("Undrain left the drain request")
	}

	// Queues: the idle queue holding a dead job is listed, in the API's
	// words; identifiers stay whole.
	b.do(t, "queues", chromedp.Navigate(s.console+"queues"), chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="idle_q"]`)))
	if got := text(t, b, `tr[data-queue="idle_q"] td[data-col="dead"]`); got != "1" {
		t.Errorf("idle_q shows %q dead", got)
	}
	heads := get(t, b, "queue columns", chromedp.Evaluate[string](`Array.from(document.querySelectorAll("table.queues th")).map(h => h.textContent.trim().toLowerCase()).join(",")`))
	for _, w := range []string{"name", "depth", "oldest pending", "pending", "running", "completed / min", "failed / min", "dead", "paused", "concurrency"} {
		if !strings.Contains(","+heads+",", ","+w+",") {
			t.Errorf("queue columns %q lack %q", heads, w)
		}
	}
	if !get(t, b, "queue name on one line", chromedp.Evaluate[bool](oneLine(`tr[data-queue="default"] td a`))) {
		t.Errorf("default is broken across lines")
	}

	// Jobs: the state counts beside the list.
	b.do(t, "overview", chromedp.Navigate(s.console), chromedp.WaitVisible(chromedp.CSS(`#dlq-depth`)))
	b.do(t, "jobs", chromedp.Navigate(s.console+"jobs"), chromedp.WaitVisible(chromedp.CSS(`#state-counts`)))
	if got := text(t, b, `#state-counts [data-count="failed"]`); got != "1" {
		t.Errorf("the state counts say %q failed, want 1", got)
	}

	// Dead letters: the action bar above the list, and select all.
	s.kill(later.JobID, "boom", nil)
	b.do(t, "dlq", chromedp.Navigate(s.console+"dlq"), chromedp.WaitVisible(chromedp.CSS(`#select-all`)))
	if above := get(t, b, "bar above", chromedp.Evaluate[bool](`document.querySelector("#requeue-selected").getBoundingClientRect().top < document.querySelector("#dlq-form table").getBoundingClientRect().top`)); !above {
		t.Errorf("Requeue selected is not above the list")
	}
	b.do(t, "select all", chromedp.Click(chromedp.CSS(`#select-all`)))
	if n := count(t, b, `#dlq-form input[name=id]:checked`); n != 2 {
		t.Errorf("select all checked %d jobs, want 2", n)
	}

	// Unknown names: the submission's answer warns, and the Overview lists
	// their jobs apart, out of its "oldest waiting".
	var typo, known wire.SubmitResponse
	s.call("POST", "/submit_job", `{"name":"tset_job"}`, &typo)
	s.call("POST", "/submit_job", `{"name":"test_job","delay_seconds":3600}`, &known)
	if len(typo.Warnings) != 1 || !strings.Contains(typo.Warnings[0], `no worker handles job name "tset_job"`) || len(known.Warnings) != 0 {
		t.Errorf("warnings: %q for tset_job, %q for test_job", typo.Warnings, known.Warnings)
	}
	if _, err := s.db.Exec(t.Context(), `UPDATE jobs SET next_run_at = now() - interval '1 hour' WHERE id = $1`, typo.JobID); err != nil {
		t.Fatal(err)
	}
	b.do(t, "overview", chromedp.Navigate(s.console), chromedp.WaitVisible(chromedp.CSS(`#dlq-depth`)))
	b.waitJS(t, "the unknown name listed", `document.querySelector('td[data-unhandled="tset_job"]') !== null`)
	if got := text(t, b, `#oldest-waiting`); strings.Contains(got, "h") && !strings.HasPrefix(got, "oldest waiting 0") {
		t.Errorf("the headline says %q: driven by the unknown name's hour", got)
	}

	// Phone width: the menu stays on the screen, the page does not
	// scroll sideways.
	if err := call(b.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: 375, Height: 800, DeviceScaleFactor: 2, Mobile: true}); err != nil {
		t.Fatal(err)
	}
	for _, page := range []string{"", "jobs", "dlq", "queues", "workers", "scheduled", "jobs/" + run.JobID} {
		b.do(t, "phone "+page, chromedp.Navigate(s.console+page), chromedp.WaitVisible(chromedp.CSS(`main h1`)))
		if !get(t, b, "menu on screen", chromedp.Evaluate[bool](`Array.from(document.querySelectorAll("header.top a, header.top button")).every(a => a.getBoundingClientRect().right <= 375) && document.documentElement.scrollWidth <= 375`)) {
			t.Errorf("at 375 px %q runs off the screen: %s", page, get(t, b, "what", chromedp.Evaluate[string](`Array.from(document.querySelectorAll("body *")).filter(e => e.getBoundingClientRect().right > 376 && !e.closest("main table")).slice(0, 5).map(e => e.tagName + "." + e.className + "#" + e.id + " " + Math.round(e.getBoundingClientRect().right)).join("; ") + " scrollWidth " + document.documentElement.scrollWidth`)))
		}
	}
	if err := call(b.ctx, emulation.ClearDeviceMetricsOverride, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}

	// Both themes: axe finds nothing serious on any page.
	for _, dark := range []bool{false, true} {
		scheme := "light"
		if dark {
			scheme = "dark"
		}
		if err := call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}}); err != nil {
			t.Fatal(err)
		}
		for _, page := range []string{"", "jobs", "jobs/" + idle.JobID, "dlq", "queues", "workers", "scheduled"} {
			b.do(t, scheme+" "+page, chromedp.Navigate(s.console+page), chromedp.WaitVisible(chromedp.CSS(`main h1`)))
			if dark && !get(t, b, "dark", chromedp.Evaluate[bool](`getComputedStyle(document.body).backgroundColor === "rgb(18, 22, 28)"`)) {
				t.Errorf("%s: not dark", page)
			}
			b.axe(t, scheme+" "+page)
		}
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser: %s", p)
	}
}
