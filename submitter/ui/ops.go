package ui

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the operator pages: Workers (drain, undrain), Scheduled (run
// now, cancel), and actions on all the jobs a filter matches (a
// confirmation that shows how many, then a background operation whose
// progress has its own page). Every action is a <form method=post> that
// works without JavaScript; htmx only refreshes the operation's progress.

// OpsService is what the operator pages read and change, implemented by
// the submitter's service as the API's routes call it.
type OpsService interface {
	WorkerList(ctx context.Context) ([]wire.Worker, error)
	WorkerDrain(ctx context.Context, id string) (wire.Worker, error)
	WorkerUndrain(ctx context.Context, id string) (wire.Worker, error)
	ScheduledList(ctx context.Context, limit int, cursor string) (wire.ScheduledJobsResponse, error)
	ScheduleList(ctx context.Context, limit int, cursor string) (wire.ScheduleListResponse, error)
	JobRunNow(ctx context.Context, id int64) (wire.SubmitResponse, error)
	JobCancel(ctx context.Context, id int64) (wire.SubmitResponse, error)
	JobDelete(ctx context.Context, id int64) (wire.SubmitResponse, error)
	BulkCount(ctx context.Context, req wire.BulkRequest) (int64, error)
	BulkStart(ctx context.Context, req wire.BulkRequest) (wire.BulkResponse, error)
	OperationGet(ctx context.Context, id int64) (wire.Operation, error)
	OperationCancel(ctx context.Context, id int64) (wire.Operation, error)
}

// opsPages are the templates of this file's pages.
var opsPages = []string{"workers", "scheduled", "bulk", "operation"}

// maxLeasedShown bounds the leased job ids a Workers row links to.
const maxLeasedShown = 10

func (c *Console) opsRoutes(r chi.Router) {
	r.Get("/workers", c.workers)
	r.Post("/workers/{id}/drain", c.drain)
	r.Post("/workers/{id}/undrain", c.undrain)
	r.Get("/scheduled", c.scheduled)
	r.Post("/scheduled/{id}/run", c.runNow)
	r.Post("/scheduled/{id}/cancel", c.cancelScheduled)
	r.Get("/bulk", c.bulkConfirm)
	r.Post("/bulk", c.bulkStart)
	r.Get("/operations/{id}", c.operation)
	r.Post("/operations/{id}/cancel", c.operationCancel)
}

// done says what an action of this file did, from a fixed word its
// redirect carries (nothing from the URL is shown as is).
var doneMessages = map[string]string{
	"drain":    "Drain requested: the worker gets no new jobs from the coordinator's next worker sync on (within a heartbeat interval); its running jobs finish.",
	"undrain":  "Drain withdrawn: the worker gets jobs again from the coordinator's next worker sync on (within a heartbeat interval).",
	"run":      "The job is due now.",
	"canceled": "The job was canceled.",
	"stopping": "Cancel requested: the job ends when its running attempt stops.",
	"deleted":  "The job was deleted.",
}

func doneFlash(r *http.Request) string { return doneMessages[r.URL.Query().Get("done")] }

// ---- Workers ----

type workerRow struct {
	wire.Worker
	Age        string // since its last heartbeat
	Leased     []string
	MoreLeased int
	PathID     string // WorkerID escaped for a path segment
}

type workersData struct{ Workers []workerRow }

func (c *Console) workers(w http.ResponseWriter, r *http.Request) {
	ws, err := c.svc.WorkerList(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	now := time.Now()
	d := workersData{Workers: make([]workerRow, len(ws))}
	for i, wk := range ws {
		row := workerRow{Worker: wk, Age: age(now.Sub(wk.LastHeartbeatAt)), Leased: wk.LeasedJobs, PathID: url.PathEscape(wk.WorkerID)}
		if len(row.Leased) > maxLeasedShown {
			row.Leased, row.MoreLeased = row.Leased[:maxLeasedShown], len(row.Leased)-maxLeasedShown
		}
		d.Workers[i] = row
	}
	c.render(w, r, http.StatusOK, "workers", Page{Title: "Workers", Nav: "workers", Flash: doneFlash(r), Refresh: true, Data: d})
}

// age is a duration as "4s", "3m 20s", "2h 5m", "3d 4h".
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		return strconv.FormatInt(s/60, 10) + "m " + strconv.FormatInt(s%60, 10) + "s"
	case s < 86400:
		return strconv.FormatInt(s/3600, 10) + "h " + strconv.FormatInt(s%3600/60, 10) + "m"
	}
	return strconv.FormatInt(s/86400, 10) + "d " + strconv.FormatInt(s%86400/3600, 10) + "h"
}

// workerID is the {id} of a worker route, unescaped (a worker id may hold
// any printable character).
func workerID(r *http.Request) string {
	id := chi.URLParam(r, "id")
	if r.URL.RawPath != "" {
		if s, err := url.PathUnescape(id); err == nil {
			return s
		}
	}
	return id
}

func (c *Console) drain(w http.ResponseWriter, r *http.Request) {
	if !c.adminForm(w, r) {
		return
	}
	if _, err := c.svc.WorkerDrain(r.Context(), workerID(r)); err != nil {
		c.fail(w, r, err)
		return
	}
	redirect(w, rootOf(r)+"workers?done=drain")
}

func (c *Console) undrain(w http.ResponseWriter, r *http.Request) {
	if !c.adminForm(w, r) {
		return
	}
	if _, err := c.svc.WorkerUndrain(r.Context(), workerID(r)); err != nil {
		c.fail(w, r, err)
		return
	}
	redirect(w, rootOf(r)+"workers?done=undrain")
}

// ---- Scheduled ----

type scheduledData struct {
	Jobs      []scheduledJob
	Schedules []wire.Schedule
	NextURL   string
	FirstURL  string
}

type scheduledJob struct {
	wire.Job
	In string // until its run time
}

func (c *Console) scheduled(w http.ResponseWriter, r *http.Request) {
	cursor := r.URL.Query().Get("cursor")
	resp, err := c.svc.ScheduledList(r.Context(), pageSize, cursor)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	scs, err := c.svc.ScheduleList(r.Context(), pageSize, "")
	if err != nil {
		c.fail(w, r, err)
		return
	}
	now := time.Now()
	d := scheduledData{Schedules: scs.Schedules}
	for _, j := range resp.Jobs {
		sj := scheduledJob{Job: j}
		if j.NextRunAt != nil {
			sj.In = age(j.NextRunAt.Sub(now))
		}
		d.Jobs = append(d.Jobs, sj)
	}
	if resp.NextCursor != nil {
		d.NextURL = rootOf(r) + "scheduled?cursor=" + url.QueryEscape(*resp.NextCursor)
	}
	if cursor != "" {
		d.FirstURL = rootOf(r) + "scheduled"
	}
	c.render(w, r, http.StatusOK, "scheduled", Page{Title: "Scheduled", Nav: "scheduled", Flash: doneFlash(r), Refresh: true, Data: d})
}

func (c *Console) runNow(w http.ResponseWriter, r *http.Request) {
	c.jobAction(w, r, func(ctx context.Context, id int64) (string, error) {
		_, err := c.svc.JobRunNow(ctx, id)
		return "run", err
	})
}

func (c *Console) cancelScheduled(w http.ResponseWriter, r *http.Request) {
	c.jobAction(w, r, func(ctx context.Context, id int64) (string, error) {
		resp, err := c.svc.JobCancel(ctx, id)
		if resp.CancelRequested {
			return "stopping", err
		}
		return "canceled", err
	})
}

// jobAction runs an admin action on job {id} and goes back to Scheduled.
func (c *Console) jobAction(w http.ResponseWriter, r *http.Request, act func(ctx context.Context, id int64) (string, error)) {
	if !c.adminForm(w, r) {
		return
	}
	id, err := pathID(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	what, err := act(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	redirect(w, rootOf(r)+"scheduled?done="+what)
}

// ---- all matching ----

// bulkActions are the actions on all matching jobs, as the forms name them.
var bulkActions = map[string]string{wire.BulkRequeue: "Requeue", wire.BulkCancel: "Cancel", wire.BulkDelete: "Delete"}

type bulkData struct {
	Q, Action, Verb string
	From            string // "dlq" or "jobs": where Back leads
	Matched         int64
	Error           string
}

// bulkRequest reads the filter (the Jobs search box's q) and the action
// of an all-matching form.
func bulkRequest(v url.Values) (wire.BulkRequest, bulkData, error) {
	d := bulkData{Q: v.Get("q"), Action: v.Get("action"), From: "jobs"}
	if v.Get("from") == "dlq" {
		d.From = "dlq"
	}
	verb, ok := bulkActions[d.Action]
	if !ok {
		return wire.BulkRequest{}, d, httpx.InvalidField("action", "must be requeue, cancel or delete")
	}
	d.Verb = verb
	se, err := parseQuery(d.Q)
	if err != nil {
		return wire.BulkRequest{}, d, httpx.InvalidField("q", "%s", err.Error())
	}
	if se.one() {
		return wire.BulkRequest{}, d, httpx.InvalidField("q", "id: and key: act on one job; use the job's page")
	}
	if !se.Scan.Empty() {
		return wire.BulkRequest{}, d, httpx.InvalidField("q", "payload:, worker: and error: cannot choose the jobs of an action")
	}
	p := se.P
	return wire.BulkRequest{Action: d.Action, Status: string(p.State), Name: p.Name, Queue: p.Queue, Fingerprint: p.Fingerprint}, d, nil
}

// bulkConfirm handles GET bulk?q=&action=: the filter is run again, and
// the page asks to confirm the action on the N jobs it matches now.
func (c *Console) bulkConfirm(w http.ResponseWriter, r *http.Request) {
	if err := requireAdmin(r); err != nil {
		c.fail(w, r, err)
		return
	}
	req, d, err := bulkRequest(r.URL.Query())
	if err == nil {
		d.Matched, err = c.svc.BulkCount(r.Context(), req)
	}
	status := http.StatusOK
	if err != nil {
		if s, body := httpx.Classify(err); s != http.StatusBadRequest {
			c.fail(w, r, err)
			return
		} else {
			d.Error, status = body.Message, s
		}
	}
	c.render(w, r, status, "bulk", Page{Title: "Confirm", Nav: d.From, Data: d})
}

// bulkStart handles POST bulk: it runs the filter once more and starts
// the operation, then shows its progress.
func (c *Console) bulkStart(w http.ResponseWriter, r *http.Request) {
	if !c.adminForm(w, r) {
		return
	}
	req, d, err := bulkRequest(r.PostForm)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	resp, err := c.svc.BulkStart(r.Context(), req)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if resp.OperationID == "" {
		d.Error = "No job matches this filter any more: nothing was done."
		c.render(w, r, http.StatusOK, "bulk", Page{Title: "Confirm", Nav: d.From, Data: d})
		return
	}
	redirect(w, rootOf(r)+"operations/"+resp.OperationID)
}

type operationData struct {
	Op      wire.Operation
	Verb    string
	Running bool
	Percent int64
}

func (c *Console) operation(w http.ResponseWriter, r *http.Request) {
	id, err := opID(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	op, err := c.svc.OperationGet(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := operationData{Op: op, Verb: bulkActions[op.Action], Running: op.State == wire.OperationRunning}
	if op.Matched > 0 {
		d.Percent = min(100, op.Processed*100/op.Matched)
	} else if !d.Running {
		d.Percent = 100
	}
	flash := ""
	if r.URL.Query().Get("done") == "cancel" {
		flash = "Operation canceled: the batches done before stay done."
	}
	c.render(w, r, http.StatusOK, "operation", Page{Title: "Operation " + op.OperationID, Nav: "jobs", Flash: flash, Data: d})
}

func (c *Console) operationCancel(w http.ResponseWriter, r *http.Request) {
	if !c.adminForm(w, r) {
		return
	}
	id, err := opID(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if _, err := c.svc.OperationCancel(r.Context(), id); err != nil {
		c.fail(w, r, err)
		return
	}
	redirect(w, rootOf(r)+"operations/"+strconv.FormatInt(id, 10)+"?done=cancel")
}

func opID(r *http.Request) (int64, error) {
	id, err := parseID(chi.URLParam(r, "id"))
	if err != nil {
		return 0, httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "operation id must be a positive integer")
	}
	return id, nil
}
