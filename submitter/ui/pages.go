package ui

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

// Page is what every template gets.
type Page struct {
	Title  string
	Nav    string // the menu entry to highlight
	Root   string // relative path to the console's root: "./", "../", ...
	Nonce  string // the CSP nonce of this answer
	Actor  string // who is logged in ("" when auth is off)
	Admin  bool   // show action controls
	AuthOn bool
	Flash  string
	Live   *liveInfo // the page's live fragments' event stream (live.go); nil: none
	// Refresh: the page's part marked data-refresh is fetched again at the
	// viewer's refresh choice (static/page.js); for pages without Live.
	Refresh bool
	Data    any
}

// render executes page's template (or, for an htmx request that is not a
// history restore, only its fragment when it has one).
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, p Page) {
	p.Root, p.Nonce, p.AuthOn = rootOf(r), nonceOf(r), c.cfg.Authn != nil
	pr := httpx.PrincipalFrom(r.Context())
	p.Admin = pr.Has(auth.ScopeAdmin)
	if p.AuthOn && pr.Kind != auth.KindAnonymous {
		p.Actor = pr.Actor()
	}
	t := c.pages[page]
	name := "layout"
	if r.Header.Get("HX-Request") == "true" && r.Header.Get("HX-History-Restore-Request") != "true" && t.Lookup("fragment") != nil {
		name = "fragment"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, p); err != nil {
		c.cfg.Logger.ErrorContext(r.Context(), "render console page", "page", page, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// ---- Overview ----

type overviewData struct {
	Snap                  overview
	States                []stateCount
	Healthy, TotalWorkers int64
	Charts                chartsData
	Queues                []queueRow
}

type queueRow struct {
	wire.QueueInfo
	Link string // its jobs
}

type stateCount struct {
	State string
	N     int64
	Link  string
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/") { // /ui: relative links need /ui/
		redirect(w, r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]+"/")
		return
	}
	name, err := chartName(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	snap, err := c.snap.get(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := overviewData{Snap: snap, Charts: c.chartsFor(r, snap, name)}
	for _, st := range job.States {
		d.States = append(d.States, stateCount{State: string(st), N: snap.Stats.Jobs[string(st)],
			Link: rootOf(r) + "jobs?q=" + url.QueryEscape("state:"+string(st))})
	}
	for _, q := range snap.Queues {
		d.Queues = append(d.Queues, queueRow{QueueInfo: q, Link: rootOf(r) + "jobs?q=" + url.QueryEscape("queue:"+q.Name)})
	}
	for state, n := range snap.Stats.Workers {
		d.TotalWorkers += n
		if state == "available" || state == "busy" {
			d.Healthy += n
		}
	}
	c.render(w, r, http.StatusOK, "overview", Page{Title: "Overview", Nav: "overview", Live: c.liveFor(r, snap), Data: d})
}

// ---- Jobs ----

type jobsData struct {
	Q        string
	Error    string
	Jobs     []wire.Job
	NextURL  string // older jobs; "" on the last page
	FirstURL string // the newest page; "" when on it
	LiveURL  string // what a live refresh re-fetches; "" when none (older pages, id:)
	Stopped  bool   // a search in steps ran out of time before the page filled
	Search   bool   // a search in steps (payload:, worker:, error:): no all-matching actions
	// Suggest completes the search box: queue: and name: qualifiers of
	// the queues and job names the refresher last saw (no query of its
	// own).
	Suggest []string
	// Counts are the jobs in each state as the refresher last counted
	// them (no query of its own), beside the list.
	Counts []stateCount
}

// maxSuggest bounds the search box's completions.
const maxSuggest = 200

// suggestions are the search box's completions from the shared snapshot:
// every queue GET /queues lists and every job name of the last hour's
// rollup, as qualifiers, sorted. It reads no store itself; it asks the
// refresher for a read if it has none, for the next page.
func (c *Console) suggestions() []string {
	snap, _ := c.snap.latest()
	if snap.At.IsZero() {
		c.snap.demand(false)
		return nil
	}
	seen := map[string]bool{}
	var out []string
	add := func(key, val string) {
		if val == "" || len(out) >= maxSuggest {
			return
		}
		if v := key + ":" + qualifierValue(val); !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	for _, q := range snap.Queues {
		add("queue", q.Name)
	}
	for _, r := range snap.Rollup {
		add("name", r.Name)
	}
	slices.Sort(out)
	return out
}

// qualifierValue is a search value as the box takes it: quoted when it
// holds a space, a quote or a colon.
func qualifierValue(v string) string {
	if strings.ContainsAny(v, " \t\"':") {
		return strconv.Quote(v)
	}
	return v
}

// stateCounts are the jobs in each state from the shared snapshot, each
// linking to its jobs; nil before the refresher's first read.
func (c *Console) stateCounts(r *http.Request) []stateCount {
	snap, _ := c.snap.latest()
	if snap.At.IsZero() {
		return nil
	}
	out := make([]stateCount, 0, len(job.States))
	for _, st := range job.States {
		out = append(out, stateCount{State: string(st), N: snap.Stats.Jobs[string(st)],
			Link: rootOf(r) + "jobs?q=" + url.QueryEscape("state:"+string(st))})
	}
	return out
}

var digits = regexp.MustCompile(`^[0-9]{1,19}$`)

func (c *Console) jobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := jobsData{Q: q.Get("q")}
	if r.Header.Get("HX-Request") == "" { // a whole page: its search box and counts
		d.Suggest = c.suggestions()
		d.Counts = c.stateCounts(r)
	}
	page := Page{Title: "Jobs", Nav: "jobs", Flash: doneFlash(r), Data: &d}
	se, err := parseQuery(d.Q)
	p := se.P
	if err == nil {
		if b := q.Get("before"); b != "" {
			if p.Before, err = parseID(b); err != nil {
				err = errors.New("before: not a job id")
			}
		}
	}
	if err != nil {
		d.Error = err.Error()
		c.render(w, r, http.StatusBadRequest, "jobs", page)
		return
	}
	base := rootOf(r) + "jobs?q=" + url.QueryEscape(d.Q)
	if p.Before > 0 {
		d.FirstURL = base
	}
	if se.one() { // id: or key: one job, if it also matches the other filters
		var j wire.Job
		if se.ID > 0 {
			j, err = c.svc.JobGet(r.Context(), se.ID)
		} else {
			j, err = c.svc.JobGetByKey(r.Context(), se.Key)
		}
		var he *httpx.Error
		switch {
		case errors.Is(err, job.ErrNotFound):
		case errors.As(err, &he) && he.Status == http.StatusBadRequest:
			d.Error = he.Message
			c.render(w, r, http.StatusBadRequest, "jobs", page)
			return
		case err != nil:
			c.fail(w, r, err)
			return
		case se.ID > 0 && j.JobID != strconv.FormatInt(se.ID, 10):
		case matches(j, p.State, p.Name, p.Queue) && (p.Before == 0 || jobID(j) < p.Before):
			d.Jobs = []wire.Job{j}
		}
		c.render(w, r, http.StatusOK, "jobs", page)
		return
	}
	p.Limit = pageSize
	var resp wire.JobListResponse
	if !se.Scan.Empty() { // a search in steps, newest first, that stops after a time budget
		d.Search = true
		resp, d.Stopped, err = c.svc.JobSearch(r.Context(), p, se.Scan)
	} else {
		if p.Before == 0 {
			if snap, err := c.snap.get(r.Context()); err == nil {
				page.Live, d.LiveURL = c.liveFor(r, snap), base+"&live=1"
			}
		}
		resp, err = c.list(r, p)
	}
	var he *httpx.Error
	if errors.As(err, &he) && he.Status == http.StatusBadRequest {
		d.Error = he.Message
		c.render(w, r, http.StatusBadRequest, "jobs", page)
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d.Jobs = resp.Jobs
	if resp.NextCursor != nil {
		d.NextURL = base + "&before=" + *resp.NextCursor
	}
	c.render(w, r, http.StatusOK, "jobs", page)
}

func jobID(j wire.Job) int64 {
	id, _ := strconv.ParseInt(j.JobID, 10, 64)
	return id
}

func matches(j wire.Job, state job.State, name, queue string) bool {
	return (state == "" || j.Status == string(state)) && (name == "" || j.Name == name) && (queue == "" || j.Queue == queue)
}

// ---- Job ----

type jobData struct {
	T               wire.JobTimeline // the job, its attempts and its timeline
	Payload, Result jsonBody
	Trace           *traceLink // nil: the job has no trace
	// Logs are the job's first jobPageLogLines log lines and its
	// attempts' dropped counts.
	Logs wire.JobLogs
	// The states the Job page offers Cancel and Delete in (those the
	// API's routes accept).
	Cancelable, Deletable []string
}

var (
	cancelableStates = []string{"waiting", "pending", "retrying", "leased"}
	deletableStates  = []string{"completed", "failed", "canceled"}
)

// jobPageLogLines bounds the log lines the Job page shows; the rest are a
// link away (GET /jobs/{id}/logs, dtsctl jobs logs).
const jobPageLogLines = 500

// job shows every field of a job, its timeline (times from its
// submission) and its attempts: GET /jobs/{id}/timeline's service call.
func (c *Console) job(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	t, err := c.svc.JobTimeline(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := jobData{T: t, Payload: showJSON(t.Payload), Result: showJSON(t.Result), Cancelable: cancelableStates, Deletable: deletableStates}
	d.Trace = c.traceLink(t.Job.TraceID)
	if d.Logs, err = c.svc.JobLogs(r.Context(), id, jobPageLogLines); err != nil {
		c.fail(w, r, err)
		return
	}
	msg := flash(r)
	if msg == "" {
		msg = doneFlash(r)
	}
	c.render(w, r, http.StatusOK, "job", Page{Title: "Job " + t.JobID, Nav: "jobs", Flash: msg, Refresh: true, Data: d})
}

// cancelJob cancels job {id} from its page (after the page's
// confirmation) and goes back to it.
func (c *Console) cancelJob(w http.ResponseWriter, r *http.Request) {
	if !c.adminForm(w, r) {
		return
	}
	id, err := pathID(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	resp, err := c.svc.JobCancel(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	done := "canceled"
	if resp.CancelRequested {
		done = "stopping"
	}
	redirect(w, rootOf(r)+"jobs/"+strconv.FormatInt(id, 10)+"?done="+done)
}

// deleteJob deletes finished job {id} from its page (after the page's
// confirmation) and goes to Jobs.
func (c *Console) deleteJob(w http.ResponseWriter, r *http.Request) {
	if !c.adminForm(w, r) {
		return
	}
	id, err := pathID(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if _, err := c.svc.JobDelete(r.Context(), id); err != nil {
		c.fail(w, r, err)
		return
	}
	redirect(w, rootOf(r)+"jobs?done=deleted")
}

// download serves a job's payload or result as a file: the way to see
// one too large to show inline.
func (c *Console) download(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	j, err := c.svc.JobGet(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	part := chi.URLParam(r, "part")
	body := j.Payload
	if part == "result" {
		body = j.Result
	}
	if len(body) == 0 {
		body = []byte("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="job-`+j.JobID+`-`+part+`.json"`)
	_, _ = w.Write(body)
}

// ---- login ----

type loginData struct {
	Error string
	Next  string
}

// nextPage accepts only a place inside the console as a login's next.
var nextPage = regexp.MustCompile(`^(jobs|jobs/[0-9]{1,19}|dlq|dlq/[0-9]{1,19}/edit|queues|workers|scheduled|operations/[0-9]{1,19})?(\?[A-Za-z0-9_.~%&=+:-]*)?$`)

func safeNext(s string) string {
	if !nextPage.MatchString(s) {
		return ""
	}
	return s
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Authn == nil {
		redirect(w, rootOf(r))
		return
	}
	c.render(w, r, http.StatusOK, "login", Page{Title: "Log in", Data: loginData{Next: safeNext(r.URL.Query().Get("next"))}})
}

// login checks the token as the API would and keeps it in an HttpOnly,
// SameSite=Strict cookie (Secure under TLS). Failed logins count against
// the address's budget of failed authentications, shared with the API and
// the console's cookies; as on the API, only failures are limited, so a
// good token logs in even from an address out of failures.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Authn == nil {
		redirect(w, rootOf(r))
		return
	}
	if err := parseForm(w, r, maxFormBytes); err != nil {
		c.fail(w, r, err)
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	again := func(status int, msg string) {
		c.render(w, r, status, "login", Page{Title: "Log in", Data: loginData{Error: msg, Next: next}})
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	p, retry, err := httpx.CheckToken(r, c.cfg.Authn, c.cfg.Failures, "Bearer "+token)
	var ae *auth.Error
	switch {
	case errors.As(err, &ae) && retry > 0:
		setRetryAfter(w, retry)
		again(http.StatusTooManyRequests, "Too many failed logins from this address; wait a little.")
		return
	case errors.As(err, &ae):
		again(http.StatusUnauthorized, "This token was refused: "+ae.Reason+".")
		return
	case err != nil:
		c.fail(w, r, err)
		return
	case !p.Has(auth.ScopeRead):
		again(http.StatusForbidden, "This token lacks the read scope the console needs.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: token, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	redirect(w, rootOf(r)+next)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	clearCookie(w, r)
	redirect(w, rootOf(r)+"login")
}

// ---- helpers ----

// pathID parses the {id} route parameter as the API does.
func pathID(r *http.Request) (int64, error) {
	id, err := parseID(chi.URLParam(r, "id"))
	if err != nil {
		return 0, httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "job id must be a positive integer")
	}
	return id, nil
}

func parseID(s string) (int64, error) {
	if !digits.MatchString(s) {
		return 0, errors.New("not a positive integer")
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, errors.New("not a positive integer")
	}
	return id, nil
}
