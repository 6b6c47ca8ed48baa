package submitter_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter"
)

// With MaxBacklog set, submissions are refused 503 backlog_full with
// Retry-After once that many due jobs wait, writing nothing; bad input
// still gets its 4xx; jobs not yet due do not count; and submissions are
// accepted again once workers have caught up.
func TestMaxBacklogRefusesSubmissionsUntilWorkersCatchUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *submitter.Config) {
		c.MaxBacklog = 3
		c.BacklogCheckInterval = 10 * time.Millisecond
	})
	for range 5 { // scheduled for later: not waiting for a worker yet
		e.submit(`{"name":"later","delay_seconds":3600}`)
	}
	// Two counts sent after those inserts answer; the bound must not trip on them.
	sent := submitter.BacklogCountsStarted(e.srv)
	testwait.For(t, 5*time.Second, "two backlog counts after the inserts", func() bool {
		return submitter.BacklogCountsAnswered(e.srv) >= sent+2
	})
	e.submit(`{"name":"a"}`)

	refused := func(status int, body []byte) bool {
		if status != http.StatusServiceUnavailable {
			return false
		}
		var r wire.ErrorResponse
		if err := json.Unmarshal(body, &r); err != nil || r.Error.Code != wire.CodeBacklogFull {
			t.Fatalf("503 with body %s, want code %s", body, wire.CodeBacklogFull)
		}
		return true
	}
	testwait.For(t, 5*time.Second, "the bound to refuse a submission", func() bool {
		status, body := e.do("POST", "/submit_job", `{"name":"a"}`)
		return refused(status, body)
	})
	if n := e.count(`SELECT count(*) FROM jobs WHERE name = 'a'`); n < 3 {
		t.Fatalf("refused with %d due jobs, bound 3", n)
	}
	before := e.jobCount()
	status, body := e.do("POST", "/submit_jobs", `[{"name":"a"},{"name":"b"}]`)
	if !refused(status, body) {
		t.Errorf("batch while full: %d %s, want 503 backlog_full", status, body)
	}
	resp, err := e.http.Client().Post(e.http.URL+"/submit_job", "application/json", strings.NewReader(`{"name":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("refusal: %d, Retry-After %q, want 503 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if status, body := e.do("POST", "/submit_job", `{"name":""}`); status != http.StatusBadRequest {
		t.Errorf("bad input while full: %d %s, want 400", status, body)
	}
	if after := e.jobCount(); after != before {
		t.Errorf("refused submissions wrote %d jobs", after-before)
	}

	e.exec(`UPDATE jobs SET status = 'completed', finished_at = now() WHERE name = 'a'`) // the workers caught up
	testwait.For(t, 5*time.Second, "submissions to be accepted again", func() bool {
		status, _ := e.do("POST", "/submit_job", `{"name":"a"}`)
		return status == http.StatusCreated
	})
}

// Between two counts the submitter adds the due jobs it accepted itself,
// so a burst cannot run past the bound while it waits for the next count;
// delayed jobs are not added.
func TestMaxBacklogCountsAcceptedJobsBetweenCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *submitter.Config) {
		c.MaxBacklog = 3
		c.BacklogCheckInterval = time.Hour // one count, at start-up
	})
	e.submit(`{"name":"later","delay_seconds":3600}`)
	for range 3 {
		e.submit(`{"name":"a"}`)
	}
	status, body := e.do("POST", "/submit_job", `{"name":"a"}`)
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), wire.CodeBacklogFull) {
		t.Errorf("fourth due job with no recount: %d %s, want 503 backlog_full", status, body)
	}
	if n := e.jobCount(); n != 4 {
		t.Errorf("%d jobs in the table, want 4", n)
	}
}
