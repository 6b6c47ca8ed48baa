package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the Dead letters page: the dead jobs grouped by name and
// error fingerprint (the normalised first line of the error, computed by
// PostgreSQL when a job dies: dts_error_fingerprint), with each group's
// jobs a link away and its requeue or delete the all-matching operation of
// ops.go on a fingerprint: filter; below, the dead jobs one by one. And
// the requeue of one dead job, with its payload as it is or edited.
//
// The groups are a count over every dead job, so no viewer runs it: the
// console keeps the last count for groupsEvery (longer when the count is
// slow) and every viewer of the page reads that one; a viewer who finds
// it old reads it again for all the others, who wait for that read.

// DeadService is what the Dead letters page reads and changes.
type DeadService interface {
	DeadList(ctx context.Context, limit int, cursor string) (wire.DLQResponse, error)
	// DeadRequeue makes a dead job pending again; a payload, when not
	// nil, replaces its own after the checks of a submitted payload (an
	// *httpx.Error 400 when refused, and nothing changes).
	DeadRequeue(ctx context.Context, id int64, payload json.RawMessage) (wire.SubmitResponse, error)
	// DeadGroups returns the limit largest groups of dead jobs by name and
	// error fingerprint.
	DeadGroups(ctx context.Context, limit int) (DeadGroups, error)
}

// The groups of the Dead letters page.
const (
	// maxGroups is how many groups the page shows: the largest.
	maxGroups = 50
	// groupsEvery is how long a count of the groups is shown before the
	// next viewer counts again; a count that took d keeps readShare*d
	// when that is longer (a large DLQ).
	groupsEvery = 5 * time.Second
)

// deadGroups is the last count of the groups, shared by every viewer.
type deadGroups struct {
	mu      sync.Mutex // held during a read: the other viewers wait for it
	at      time.Time  // when the shown count started; zero: none yet
	spacing time.Duration
	stale   time.Time // counts started before it are out of date (an action)
	last    DeadGroups
	reads   atomic.Int64 // counts made, for tests
}

// get returns the groups as counted at most spacing ago, counting them
// again when older.
func (g *deadGroups) get(ctx context.Context, svc DeadService) (DeadGroups, time.Time, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.at.IsZero() && time.Since(g.at) < g.spacing && g.at.After(g.stale) {
		return g.last, g.at, nil
	}
	// Not the viewer's to cancel: the others wait for this read.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
	defer cancel()
	start := time.Now()
	g.reads.Add(1)
	res, err := svc.DeadGroups(rctx, maxGroups)
	if err != nil {
		return DeadGroups{}, time.Time{}, err
	}
	g.last, g.at, g.spacing = res, start, max(groupsEvery, readShare*time.Since(start))
	return res, start, nil
}

// invalidate makes the next viewer count again: this console just changed
// the DLQ (a requeue). Only admin actions call it.
func (g *deadGroups) invalidate() {
	g.mu.Lock()
	g.stale = time.Now()
	g.mu.Unlock()
}

type deadData struct {
	Jobs     []wire.DLQJob
	NextURL  string
	FirstURL string
	// The groups, on the first page only.
	First       bool
	Groups      []groupRow
	GroupsAt    time.Time
	GroupsTotal int64 // groups in all (Groups holds at most maxGroups)
	Dead        int64 // dead jobs in all, at GroupsAt
	GroupsError string
	MaxGroups   int
}

// groupRow is one group as the page shows it; the URLs are "" for a group
// without a fingerprint (jobs made dead outside the store), which no
// filter selects.
type groupRow struct {
	DeadGroup
	JobsURL    string // the Jobs page, filtered to the group
	RequeueURL string // the confirmation of Requeue all
	DeleteURL  string // the confirmation of Delete all
}

// groupQuery is the search (the Jobs page's syntax) that selects the dead
// jobs of a group; both values are quoted, whatever they hold.
func groupQuery(g DeadGroup) string {
	return "state:failed name:" + strconv.Quote(g.Name) + " fingerprint:" + strconv.Quote(g.Fingerprint)
}

func (c *Console) dead(w http.ResponseWriter, r *http.Request) {
	cursor := r.URL.Query().Get("cursor")
	resp, err := c.svc.DeadList(r.Context(), pageSize, cursor)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := deadData{Jobs: resp.Jobs, First: cursor == "", MaxGroups: maxGroups}
	if resp.NextCursor != nil {
		d.NextURL = rootOf(r) + "dlq?cursor=" + url.QueryEscape(*resp.NextCursor)
	}
	if cursor != "" {
		d.FirstURL = rootOf(r) + "dlq"
	}
	if d.First {
		gs, at, err := c.groups.get(r.Context(), c.svc)
		if err != nil {
			status, body := httpx.Classify(err)
			if status >= 500 {
				c.cfg.Logger.ErrorContext(r.Context(), "count the dead-letter groups", "error", err)
			}
			d.GroupsError = body.Message
		}
		d.GroupsAt, d.GroupsTotal, d.Dead = at, gs.Total, gs.Dead
		root := rootOf(r)
		for _, g := range gs.Groups {
			row := groupRow{DeadGroup: g}
			if g.Fingerprint != "" {
				q := url.QueryEscape(groupQuery(g))
				row.JobsURL = root + "jobs?q=" + q
				row.RequeueURL = root + "bulk?action=requeue&from=dlq&q=" + q
				row.DeleteURL = root + "bulk?action=delete&from=dlq&q=" + q
			}
			d.Groups = append(d.Groups, row)
		}
	}
	c.render(w, r, http.StatusOK, "dlq", Page{Title: "Dead letters", Nav: "dlq", Flash: flash(r), Refresh: true, Data: d})
}

// ---- requeue one, as it is or with an edited payload ----

type editData struct {
	Job      wire.Job
	Dead     bool   // only a dead job can be requeued
	TooLarge bool   // the payload is over maxInlineBytes: no form, the API
	Text     string // the payload as the textarea holds it
	Error    string // why the payload sent was refused
}

// editPage handles GET dlq/{id}/edit (admin): a form with the dead job's
// payload, indented, to edit and requeue the job with.
func (c *Console) editPage(w http.ResponseWriter, r *http.Request) {
	if err := requireAdmin(r); err != nil {
		c.fail(w, r, err)
		return
	}
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
	d := editData{Job: j, Dead: j.Status == "failed", TooLarge: len(j.Payload) > maxInlineBytes}
	if !d.TooLarge {
		d.Text = showJSON(j.Payload).Text
	}
	c.renderEdit(w, r, http.StatusOK, d)
}

func (c *Console) renderEdit(w http.ResponseWriter, r *http.Request, status int, d editData) {
	c.render(w, r, status, "requeue", Page{Title: "Requeue job " + d.Job.JobID, Nav: "dlq", Data: d})
}

// maxEditForm is the largest form a requeue takes: its payload
// URL-encoded (three bytes a byte at worst) and the rest of the form.
func (c *Console) maxEditForm() int64 {
	n := c.cfg.MaxPayloadBytes
	if n <= 0 {
		n = maxInlineBytes
	}
	return 3*int64(n) + maxFormBytes
}

// requeueOne handles POST dlq/{id}/requeue, from the DLQ page, the job's
// page (form field from=job) or the edit page (a payload field): back
// there, saying what happened. A payload the service refuses shows the
// edit page again with the text sent and why, and nothing changed.
func (c *Console) requeueOne(w http.ResponseWriter, r *http.Request) {
	if !c.adminFormMax(w, r, c.maxEditForm()) {
		return
	}
	id, err := pathID(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if r.PostForm.Has("payload") {
		c.requeueEdited(w, r, id, r.PostForm.Get("payload"))
		return
	}
	ok, failed := c.requeue(r.Context(), []int64{id})
	back := "dlq"
	if r.PostForm.Get("from") == "job" {
		back = "jobs/" + strconv.FormatInt(id, 10)
	}
	redirect(w, rootOf(r)+back+outcome(ok, failed))
}

func (c *Console) requeueEdited(w http.ResponseWriter, r *http.Request, id int64, text string) {
	var err error
	if strings.TrimSpace(text) == "" {
		err = httpx.InvalidField("payload", "empty: write null for no payload")
	} else {
		_, err = c.svc.DeadRequeue(r.Context(), id, json.RawMessage(text))
	}
	var he *httpx.Error
	if errors.As(err, &he) && he.Status == http.StatusBadRequest {
		j, gerr := c.svc.JobGet(r.Context(), id)
		if gerr != nil {
			c.fail(w, r, gerr)
			return
		}
		c.renderEdit(w, r, http.StatusBadRequest, editData{Job: j, Dead: j.Status == "failed", Text: text,
			Error: he.Message + syntaxHint(text)})
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.groups.invalidate()
	redirect(w, rootOf(r)+"jobs/"+strconv.FormatInt(id, 10)+outcome(1, 0)+"&edited=1")
}

// syntaxHint says where text stops being JSON (" (line 3, column 7: ...)"),
// "" when it is JSON: a hint beside the service's verdict, not a rule.
func syntaxHint(text string) string {
	var se *json.SyntaxError
	if err := json.Unmarshal([]byte(text), new(json.RawMessage)); !errors.As(err, &se) {
		return ""
	}
	before := []byte(text)[:min(int(se.Offset), len(text))]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return " (line " + strconv.Itoa(line) + ", column " + strconv.Itoa(col) + ": " + se.Error() + ")"
}

// requeueSelected handles POST dlq/requeue with the ids ticked (id=1&id=2).
func (c *Console) requeueSelected(w http.ResponseWriter, r *http.Request) {
	if !c.adminForm(w, r) {
		return
	}
	raw := r.PostForm["id"]
	if len(raw) > maxRequeueIDs {
		c.fail(w, r, httpx.InvalidField("id", "at most %d at once", maxRequeueIDs))
		return
	}
	ids := make([]int64, 0, len(raw))
	for _, s := range raw {
		id, err := parseID(s)
		if err != nil {
			c.fail(w, r, httpx.InvalidField("id", "must be job ids"))
			return
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ok, failed := c.requeue(r.Context(), slices.Compact(ids))
	redirect(w, rootOf(r)+"dlq"+outcome(ok, failed))
}

// requeue requeues each job through the service (each audited on its own)
// and counts the outcomes. A job no longer dead (requeued meanwhile) is a
// failure, not an error of the whole request.
func (c *Console) requeue(ctx context.Context, ids []int64) (ok, failed int) {
	for _, id := range ids {
		if _, err := c.svc.DeadRequeue(ctx, id, nil); err != nil {
			if status, _ := httpx.Classify(err); status >= 500 {
				c.cfg.Logger.ErrorContext(ctx, "console requeue", "job_id", id, "error", err)
			}
			failed++
			continue
		}
		ok++
	}
	if ok > 0 {
		c.groups.invalidate()
	}
	return ok, failed
}

func outcome(ok, failed int) string {
	return "?requeued=" + strconv.Itoa(ok) + "&failed=" + strconv.Itoa(failed)
}

// flash says what the last action did, from the numbers its redirect
// carries (numbers only: nothing from the URL is shown as is).
func flash(r *http.Request) string {
	q := r.URL.Query()
	if !q.Has("requeued") {
		return ""
	}
	ok, _ := strconv.Atoi(q.Get("requeued"))
	failed, _ := strconv.Atoi(q.Get("failed"))
	switch {
	case ok == 0 && failed == 0:
		return "Nothing was selected."
	case ok == 1 && failed == 0 && q.Get("edited") == "1":
		return "1 job requeued with the edited payload."
	case failed == 0:
		return plural(ok, "job") + " requeued."
	default:
		return plural(ok, "job") + " requeued; " + plural(failed, "job") + " could not be (no longer dead, or gone)."
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
