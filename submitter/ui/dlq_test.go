package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

// The Dead letters page's fixtures: groups with hostile names,
// fingerprints and sample errors, one without a fingerprint, and more
// groups than the page shows.

func (f *fakeService) DeadRequeue(_ context.Context, id int64, payload json.RawMessage) (wire.SubmitResponse, error) {
	if payload != nil && !json.Valid(payload) { // the service's rule, for this fake: JSON
		return wire.SubmitResponse{}, httpx.InvalidField("payload", "must be valid JSON")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.jobs[id].Status != "failed" {
		return wire.SubmitResponse{}, job.ErrConflict
	}
	f.requeued = append(f.requeued, id)
	if payload != nil {
		if f.payloads == nil {
			f.payloads = map[int64]string{}
		}
		f.payloads[id] = string(payload)
	}
	return wire.SubmitResponse{JobID: itoa(id), Status: "pending"}, nil
}

// deadFingerprint is the first group's fingerprint: hostile, with every
// character the search syntax quotes.
const deadFingerprint = hostile + ` dial tcp <ip>: "x" 'y' \ é`

func (f *fakeService) DeadGroups(_ context.Context, limit int) (DeadGroups, error) {
	// A slow count is the fault (TestDeadGroupsShared): viewers must
	// arrive while it runs, and they queue inside the console, where no
	// signal says they all have, so it takes time rather than a gate.
	time.Sleep(time.Duration(f.slowDead.Load()))
	f.groups.Add(1)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	gs := DeadGroups{Total: 120, Dead: 5000, Groups: []DeadGroup{
		{Name: hostile + " name", Fingerprint: deadFingerprint, Count: 4000, LastFailed: t0, NewestID: 1, Sample: hostile + " sample"},
		{Name: "mail", Fingerprint: "timeout after <dur>", Count: 900, LastFailed: t0, NewestID: 2, Sample: "timeout after 30s"},
		{Name: "by_hand", Count: 3, LastFailed: t0, NewestID: 3, Sample: hostile},
	}}
	gs.Groups = gs.Groups[:min(limit, len(gs.Groups))]
	return gs, nil
}

// TestDeadLettersPage: the groups come first, escaped and shortened, each
// with a link to its jobs (a search the Jobs page reads back as the same
// group) and, for admin, its Requeue all and Delete all (the all-matching
// confirmation of the group); a group without a fingerprint gets neither;
// the page says it shows the largest of more groups; read only sees no
// action.
func TestDeadLettersPage(t *testing.T) {
	t.Parallel()
	c, _ := newConsole(t, true)
	body := checkPage(t, "dlq", serve(c, "GET", "/dlq", "admin", nil), http.StatusOK)
	q := "state:failed name:" + strconv.Quote(hostile+" name") + " fingerprint:" + strconv.Quote(deadFingerprint)
	link := `href="./jobs?q=` + strings.ReplaceAll(url.QueryEscape(q), "+", "&#43;") + `"`
	for _, want := range []string{
		`<tr data-group="0">`, `<tr data-group="2">`, `id="groups-shown">3</span> largest of 120 groups`, "5000 dead jobs",
		link, `class="group-requeue"`, `href="./bulk?action=requeue&amp;from=dlq&amp;q=` + strings.ReplaceAll(url.QueryEscape(q), "+", "&#43;") + `"`,
		`href="./bulk?action=delete&amp;from=dlq&amp;q=`, "&lt;script&gt;alert(1)&lt;/script&gt;", `title="e.g. &lt;script&gt;`,
		"<code>timeout after &lt;dur&gt;</code>", "made dead by hand", `href="./dlq/1/edit"`, `<h2 id="jobs-title">Jobs</h2>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("lacks %q\n%.6000s", want, body)
		}
	}
	if n := strings.Count(body, `class="group-requeue"`); n != 2 {
		t.Errorf("%d groups offer Requeue all, want 2 (not the one without a fingerprint)", n)
	}
	// The link's search selects the group again.
	se, err := parseQuery(q)
	if err != nil || se.P.Name != hostile+" name" || se.P.Fingerprint != deadFingerprint || se.P.State != job.StateFailed {
		t.Errorf("the group's search reads back as %+v, %v", se, err)
	}
	ro := checkPage(t, "dlq read only", serve(c, "GET", "/dlq", "read", nil), http.StatusOK)
	for _, not := range []string{"group-requeue", "group-delete", "edit-requeue", "Requeue", "/bulk"} {
		if strings.Contains(ro, not) {
			t.Errorf("read only sees %q", not)
		}
	}
	if !strings.Contains(ro, `class="group-jobs"`) {
		t.Errorf("read only sees no link to a group's jobs")
	}
	older := checkPage(t, "dlq page 2", serve(c, "GET", "/dlq?cursor=123-1", "admin", nil), http.StatusOK)
	if strings.Contains(older, "groups-title") {
		t.Errorf("an older page shows the groups again")
	}
}

// TestDeadGroupsShared: fifty viewers at once cost one count of the
// groups; the next viewers within groupsEvery none; a requeue from the
// console makes the next viewer count again.
func TestDeadGroupsShared(t *testing.T) {
	t.Parallel()
	c, f := newConsole(t, true)
	f.slowDead.Store(int64(100 * time.Millisecond))
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if w := serve(c, "GET", "/dlq", "read", nil); w.Code != http.StatusOK {
				t.Errorf("dlq: %d", w.Code)
			}
		})
	}
	wg.Wait()
	for range 10 {
		serve(c, "GET", "/dlq", "read", nil)
	}
	if n := f.groups.Load(); n != 1 {
		t.Errorf("60 views counted the groups %d times, want once", n)
	}
	if w := serve(c, "POST", "/dlq/1/requeue", "admin", url.Values{}); w.Code != http.StatusSeeOther {
		t.Fatalf("requeue: %d", w.Code)
	}
	serve(c, "GET", "/dlq", "read", nil)
	serve(c, "GET", "/dlq", "read", nil)
	if n := f.groups.Load(); n != 2 {
		t.Errorf("after a requeue the groups were counted %d times in all, want 2", n)
	}
}

// TestFingerprintQualifier: fingerprint: in the search box, at most once,
// not with id: or key:; the all-matching action takes it to the bulk
// request.
func TestFingerprintQualifier(t *testing.T) {
	t.Parallel()
	se, err := parseQuery(`name:send fingerprint:"timeout after <dur>" state:failed`)
	if err != nil || se.P != (ListParams{Name: "send", Fingerprint: "timeout after <dur>", State: job.StateFailed}) {
		t.Errorf("parse = %+v, %v", se.P, err)
	}
	for q, want := range map[string]string{
		"fingerprint:a fingerprint:b": "given twice",
		"id:3 fingerprint:x":          "does not go with id or key",
		`key:k fingerprint:x`:         "does not go with id or key",
		`fingerprint:"abc`:            "unclosed quote",
	} {
		if _, err := parseQuery(q); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parse %q = %v, want %q", q, err, want)
		}
	}
	c, f := newConsole(t, true)
	q := `state:failed name:mail fingerprint:"timeout after <dur>"`
	w := serve(c, "POST", "/bulk", "admin", url.Values{"action": {"requeue"}, "q": {q}, "from": {"dlq"}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("bulk: %d", w.Code)
	}
	if want := (wire.BulkRequest{Action: "requeue", Status: "failed", Name: "mail", Fingerprint: "timeout after <dur>"}); len(f.bulk) != 1 || f.bulk[0] != want {
		t.Errorf("bulk request %+v, want %+v", f.bulk, want)
	}
	body := checkPage(t, "confirm", serve(c, "GET", "/bulk?action=delete&from=dlq&q="+url.QueryEscape(q), "admin", nil), http.StatusOK)
	if !strings.Contains(body, `id="bulk-confirm"`) || !strings.Contains(body, `href="./dlq"`) {
		t.Errorf("the group's confirmation:\n%.3000s", body)
	}
}

// TestRequeueEdited: the edit form of a dead job holds its payload; a
// requeue with an edited payload goes to the service, audited there, and
// back to the job saying so; refused JSON shows the form again with the
// text sent, where it went wrong and nothing requeued; read only sees no
// form and its forged POST gets 403; a job not dead has no form.
func TestRequeueEdited(t *testing.T) {
	t.Parallel()
	c, f := newConsole(t, true)
	body := checkPage(t, "edit", serve(c, "GET", "/dlq/1/edit", "admin", nil), http.StatusOK)
	for _, want := range []string{`<textarea id="payload" name="payload"`, `action="../../dlq/1/requeue"`, `&#34;html&#34;: &#34;&lt;script&gt;`,
		`id="requeue-edited"`} {
		if !strings.Contains(body, want) {
			t.Errorf("edit page lacks %q\n%.3000s", want, body)
		}
	}
	if b := checkPage(t, "job", serve(c, "GET", "/jobs/1", "admin", nil), http.StatusOK); !strings.Contains(b, `href="../dlq/1/edit"`) {
		t.Errorf("the dead job's page has no link to the edit form")
	}
	checkPage(t, "edit read only", serve(c, "GET", "/dlq/1/edit", "read", nil), http.StatusForbidden)
	checkPage(t, "forged edit", serve(c, "POST", "/dlq/1/requeue", "read", url.Values{"payload": {`{"x":1}`}}), http.StatusForbidden)
	checkPage(t, "cross-origin edit", serve(c, "POST", "/dlq/1/requeue", "admin", url.Values{"payload": {`{"x":1}`}},
		"Origin", "http://evil.example"), http.StatusForbidden)
	if b := checkPage(t, "read-only job", serve(c, "GET", "/jobs/1", "read", nil), http.StatusOK); strings.Contains(b, "edit-requeue") {
		t.Errorf("read only sees the edit link")
	}
	if nd := checkPage(t, "edit a live job", serve(c, "GET", "/dlq/4/edit", "admin", nil), http.StatusOK); !strings.Contains(nd, `id="not-dead"`) ||
		strings.Contains(nd, "<textarea") {
		t.Errorf("a pending job's edit page offers a form")
	}
	if big := checkPage(t, "edit a large payload", serve(c, "GET", "/dlq/3/edit", "admin", nil), http.StatusOK); strings.Contains(big, "<textarea") {
		t.Errorf("a payload over %d bytes is offered in a textarea", maxInlineBytes)
	}

	bad := "{\n  \"to\": " + hostile + "\n}"
	w := serve(c, "POST", "/dlq/1/requeue", "admin", url.Values{"payload": {bad}})
	body = checkPage(t, "bad json", w, http.StatusBadRequest)
	for _, want := range []string{`id="payload-error"`, "payload: must be valid JSON", "line 2, column", "&lt;script&gt;alert(1)", `aria-invalid="true"`} {
		if !strings.Contains(body, want) {
			t.Errorf("refused payload page lacks %q\n%.3000s", want, body)
		}
	}
	empty := checkPage(t, "empty", serve(c, "POST", "/dlq/1/requeue", "admin", url.Values{"payload": {"  "}}), http.StatusBadRequest)
	if !strings.Contains(empty, "write null") {
		t.Errorf("an empty payload: %.2000s", empty)
	}
	f.mu.Lock()
	if len(f.requeued) != 0 {
		t.Errorf("refused payloads requeued %v", f.requeued)
	}
	f.mu.Unlock()

	w = serve(c, "POST", "/dlq/1/requeue", "admin", url.Values{"payload": {"{\"fixed\": true}\n"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "../../jobs/1?requeued=1&failed=0&edited=1" {
		t.Fatalf("requeue edited: %d %q", w.Code, w.Header().Get("Location"))
	}
	f.mu.Lock()
	if len(f.requeued) != 1 || f.payloads[1] != "{\"fixed\": true}\n" {
		t.Errorf("requeued %v with %v", f.requeued, f.payloads)
	}
	f.mu.Unlock()
	if b := checkPage(t, "flash", serve(c, "GET", "/jobs/1?requeued=1&failed=0&edited=1", "admin", nil), http.StatusOK); !strings.Contains(b,
		"1 job requeued with the edited payload.") {
		t.Errorf("no flash after the edited requeue")
	}
	// The form takes a payload larger than the other forms' limit.
	large := `"` + strings.Repeat("a", maxFormBytes) + `"`
	if w := serve(c, "POST", "/dlq/2/requeue", "admin", url.Values{"payload": {large}}); w.Code != http.StatusSeeOther {
		t.Errorf("a %d-byte payload: %d", len(large), w.Code)
	}
	if w := serve(c, "POST", "/dlq/2/requeue", "admin", url.Values{"payload": {strings.Repeat("a", int(c.maxEditForm()))}}); w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a form over the limit: %d", w.Code)
	}
}
