package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// TestJobTimelineFleet runs a job that fails once and then completes on
// another worker, with a real coordinator and workers: the Job page
// shows both leases with their workers and distinct tokens, the backoff
// and the result, and GET /jobs/{id}/timeline the same; a result sent
// afterwards with the first lease's token is rejected and shows on the
// timeline as a stale result of that lease. axe-core checks the page.
func TestJobTimelineFleet(t *testing.T) {
	skipBrowserInShort(t)
	t.Parallel()
	s := newSite(t)
	// network_task GETs this; it fails until the first attempt has.
	var failing atomic.Bool
	failing.Store(true)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(target.Close)
	f := newFleet(t, s, "BACKOFF_BASE=3s", "BACKOFF_JITTER=0")
	for _, id := range []string{"wa", "wb"} {
		f.worker(id, "NETWORK_TASK_URL="+target.URL)
	}
	testwait.For(t, 20*time.Second, "both workers available", func() bool { return s.count(`SELECT count(*) FROM workers WHERE state = 'available'`) == 2 })

	var sub wire.SubmitResponse
	s.call("POST", "/submit_job", `{"name":"network_task","max_retries":3}`, &sub)
	var tl wire.JobTimeline
	read := func() wire.JobTimeline {
		var tl wire.JobTimeline
		s.call("GET", "/jobs/"+sub.JobID+"/timeline", "", &tl)
		return tl
	}
	testwait.For(t, 20*time.Second, "the first attempt to fail", func() bool { tl = read(); return tl.Status == "retrying" })
	first := tl.Attempts[0].WorkerID
	second := map[string]string{"wa": "wb", "wb": "wa"}[first]
	// The retry goes to the other worker: the first is drained (within a
	// heartbeat, well inside the 3 s backoff), and the target answers now.
	s.call("POST", "/workers/"+first+"/drain", "", nil)
	failing.Store(false)
	testwait.For(t, 20*time.Second, "the job to complete", func() bool { tl = read(); return tl.Status == "completed" })

	if len(tl.Attempts) != 2 {
		t.Fatalf("attempts = %+v, want 2", tl.Attempts)
	}
	a1, a2 := tl.Attempts[0], tl.Attempts[1]
	if a1.WorkerID != first || a1.LeaseToken == "" || a1.Outcome != "error" || a1.RetryAt == nil || a1.DurationMS == nil ||
		a1.NextState != "retrying" || !strings.Contains(a1.Error, "503") {
		t.Errorf("attempt 1 = %+v", a1)
	}
	if a2.WorkerID != second || a2.LeaseToken == "" || a2.LeaseToken == a1.LeaseToken || a2.Outcome != "completed" || a2.DurationMS == nil {
		t.Errorf("attempt 2 = %+v (attempt 1's token %s)", a2, a1.LeaseToken)
	}
	var kinds []string
	for _, e := range tl.Timeline {
		kinds = append(kinds, e.Kind)
		if e.Kind == "backoff" {
			if d := e.Until.Sub(e.At); d != 3*time.Second {
				t.Errorf("the backoff is %v, want 3s", d)
			}
		}
	}
	if got, want := strings.Join(kinds, " "), "submitted leased failed backoff leased completed"; got != want {
		t.Errorf("timeline kinds: %s, want %s", got, want)
	}

	// A late result of the first lease, as its worker would send it.
	q, err := queue.Open(t.Context(), redistest.URL(), s.prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	id, _ := strconv.ParseInt(sub.JobID, 10, 64)
	token, _ := strconv.ParseInt(a1.LeaseToken, 10, 64)
	now := time.Now()
	if err := q.SendResults(t.Context(), []wire.Result{{JobID: id, LeaseToken: token, WorkerID: first, Attempt: 1,
		Outcome: wire.OutcomeCompleted, Result: []byte(`"late"`), StartedAt: now, FinishedAt: now}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "the stale result on the timeline", func() bool {
		tl = read()
		last := tl.Timeline[len(tl.Timeline)-1]
		return last.Kind == "stale_result" && last.WorkerID == first && last.LeaseToken == a1.LeaseToken && last.OfAttempt == 1
	})
	if tl.Status != "completed" || string(tl.Result) == `"late"` {
		t.Errorf("after the stale result: %s, result %s", tl.Status, tl.Result)
	}

	// The page.
	b := newBrowser(t)
	b.do(t, "login page", chromedp.Navigate(s.console+"jobs/"+sub.JobID), chromedp.WaitVisible(chromedp.CSS(`#token`)))
	b.login(t, s.admin)
	b.do(t, "job", chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	leased := get(t, b, "leases", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#timeline li[data-kind="leased"]')].map(e => e.innerText)`))
	if len(leased) != 2 || !strings.Contains(leased[0], "Attempt 1 leased to "+first+", token "+a1.LeaseToken) ||
		!strings.Contains(leased[1], "Attempt 2 leased to "+second+", token "+a2.LeaseToken) {
		t.Errorf("the page's leases: %q", leased)
	}
	for sel, want := range map[string]string{
		`#timeline li[data-kind="failed"]`:       "Attempt 1 failed on " + first + ": error",
		`#timeline li[data-kind="backoff"]`:      "Retrying after a backoff of 3 s",
		`#timeline li[data-kind="completed"]`:    "Attempt 2 completed on " + second,
		`#timeline li[data-kind="stale_result"]`: "Rejected a stale result (completed) from " + first + ", token " + a1.LeaseToken + ": the lease of attempt 1, which had ended",
	} {
		if got := text(t, b, sel); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q in it", sel, got, want)
		}
	}
	rows := get(t, b, "attempts", chromedp.Evaluate[[]string](`[...document.querySelectorAll('table.attempts tbody tr')].map(e => e.innerText)`))
	if len(rows) != 2 || !strings.Contains(rows[0], first) || !strings.Contains(rows[0], a1.LeaseToken) ||
		!strings.Contains(rows[1], second) || !strings.Contains(rows[1], a2.LeaseToken) || !strings.Contains(rows[1], "completed") {
		t.Errorf("the attempts table: %q", rows)
	}
	b.axe(t, "job timeline")
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser: %s", p)
	}
}
