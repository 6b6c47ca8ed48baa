package submitter_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/wire"
)

// TestDeadListByQueue: GET /dlq?queue=Q lists Q's dead jobs only, page by
// page; a queue holding none, or unknown, is an empty page; a queue name
// GET /jobs refuses is refused in the same words.
func TestDeadListByQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mail []string
	for i, q := range []string{"mail", "default", "mail", "reports", "mail"} {
		id := e.submit(`{"name":"d","queue":"` + q + `"}`).JobID
		e.killWith("boom", id)
		if q == "mail" {
			mail = append(mail, id)
		}
		if i == 4 {
			e.submit(`{"name":"d","queue":"mail"}`) // live: never in the DLQ
		}
	}
	slices.Reverse(mail) // the most recently failed first (ties: the newest id)

	var got []string
	cursor := ""
	for range 5 {
		var page wire.DLQResponse
		status, b := e.do("GET", "/dlq?queue=mail&limit=2&cursor="+url.QueryEscape(cursor), "")
		e.must(http.StatusOK, &page, status, b)
		for _, j := range page.Jobs {
			if j.Queue != "mail" || j.Status != "failed" {
				t.Errorf("GET /dlq?queue=mail listed job %s of queue %s, %s", j.JobID, j.Queue, j.Status)
			}
			got = append(got, j.JobID)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if !slices.Equal(got, mail) {
		t.Errorf("GET /dlq?queue=mail in pages of 2 = %v, want %v", got, mail)
	}
	for _, q := range []string{"nosuch", "mai"} {
		var page wire.DLQResponse
		status, b := e.do("GET", "/dlq?queue="+q, "")
		e.must(http.StatusOK, &page, status, b)
		if len(page.Jobs) != 0 || page.NextCursor != nil {
			t.Errorf("GET /dlq?queue=%s = %s, want no job", q, b)
		}
	}
	var all wire.DLQResponse
	status, b := e.do("GET", "/dlq?queue=", "")
	e.must(http.StatusOK, &all, status, b)
	if len(all.Jobs) != 5 {
		t.Errorf("GET /dlq?queue= listed %d jobs, want every queue's 5", len(all.Jobs))
	}
	for _, q := range []string{"bad name", "q/1", strings.Repeat("q", 65)} {
		status, want := e.do("GET", "/jobs?queue="+url.QueryEscape(q), "")
		got, body := e.do("GET", "/dlq?queue="+url.QueryEscape(q), "")
		if status != http.StatusBadRequest || got != status || string(body) != string(want) {
			t.Errorf("queue %q: GET /jobs %d %s, GET /dlq %d %s", q, status, want, got, body)
		}
	}
}
