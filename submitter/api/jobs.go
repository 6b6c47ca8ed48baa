package api

import (
	"context"
	"net/http"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/app"
)

// This file holds the job routes: submission (POST /submit_job,
// /submit_jobs; POST /jobs is compat.go's), reading (GET /jobs,
// /jobs/{id}, /jobs/{id}/timeline, /jobs/scheduled) and the actions on one
// job or many (cancel, run now, delete, bulk; admin and audited).

// ---- submission ----

// submitJob handles POST /submit_job (POST /jobs is postJobs, compat.go).
func (h *API) submitJob(w http.ResponseWriter, r *http.Request) error {
	p, err := h.decodeSingle(r)
	if err != nil {
		return err
	}
	return h.answerOne(w, r, p)
}

// answerOne submits one job (submitOne) and answers with it: 201 for a new
// job, 200 for an earlier one an idempotency key matched.
func (h *API) answerOne(w http.ResponseWriter, r *http.Request, p app.JobInsertParams) error {
	resp, created, err := h.submitOne(w, r, p)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	httpx.WriteJSON(w, status, resp)
	return nil
}

// submitOne admits and inserts one validated job: the path every
// single-job route takes (the compatibility routes of compat.go too).
// created is false when an idempotency key matched an earlier job; a job
// created gets the warnings of its name (app.NameWarnings), which every
// route's answer carries.
func (h *API) submitOne(w http.ResponseWriter, r *http.Request, p app.JobInsertParams) (resp wire.SubmitResponse, created bool, err error) {
	if err := h.app.CheckJobNames(r.Context(), []app.JobInsertParams{p}, false); err != nil {
		return resp, false, err
	}
	if err := h.admit(w); err != nil {
		return resp, false, err
	}
	ctx, tp, end := traceSubmit(r, "dts.submit")
	defer func() { end(err) }()
	p.TraceParent = tp
	resps, n, err := h.app.Insert(ctx, []app.JobInsertParams{p})
	if err != nil {
		return resp, false, err
	}
	resp = resps[0]
	if n > 0 {
		resp.Warnings = h.app.NameWarnings(r.Context(), []app.JobInsertParams{p})
	}
	return resp, n > 0, nil
}

// submitJobs handles POST /submit_jobs.
func (h *API) submitJobs(w http.ResponseWriter, r *http.Request) (err error) {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	if r.Header.Get("Idempotency-Key") != "" {
		return httpx.InvalidField("Idempotency-Key header", "not supported on a batch; set idempotency_key on each job")
	}
	params, err := decodeBatch(body, h.cfg.MaxPayloadBytes)
	if err != nil {
		return err
	}
	if err := h.app.CheckJobNames(r.Context(), params, true); err != nil {
		return err
	}
	if err := h.admit(w); err != nil {
		return err
	}
	ctx, tp, end := traceSubmit(r, "dts.submit_batch")
	defer func() { end(err) }()
	if tp != "" {
		for i := range params {
			params[i].TraceParent = tp
		}
	}
	resps, created, err := h.app.Insert(ctx, params)
	if err != nil {
		return err
	}
	status := http.StatusOK // every job was an earlier one (a retried batch)
	if created > 0 {
		status = http.StatusCreated
	}
	if warnings := h.app.NameWarningsEach(ctx, params); warnings != nil {
		for i := range resps {
			resps[i].Warnings = warnings[i]
		}
	}
	resp := wire.BatchSubmitResponse{Jobs: resps}
	if params[len(params)-1].Callback {
		resp.Jobs, resp.Callback = resps[:len(resps)-1], &resps[len(resps)-1]
	}
	httpx.WriteJSON(w, status, resp)
	return nil
}

// admit refuses a submission while the backlog is full (app.Admit), with
// Retry-After.
func (h *API) admit(w http.ResponseWriter) error {
	if err := h.app.Admit(); err != nil {
		w.Header().Set("Retry-After", "1")
		return err
	}
	return nil
}

// traceSubmit starts a submission's trace (app.TraceSubmit) from the
// request's traceparent header. Header is read by its canonical key,
// without Get, which would allocate the key on every submission.
func traceSubmit(r *http.Request, name string) (ctx context.Context, traceParent string, end func(error)) {
	var in string
	if v := r.Header["Traceparent"]; len(v) > 0 {
		in = v[0]
	}
	return app.TraceSubmit(r.Context(), in, name)
}

// decodeSingle reads and decodes the body of a single-job submission
// (/submit_job and the routes that take its body), with the
// Idempotency-Key header.
func (h *API) decodeSingle(r *http.Request) (app.JobInsertParams, error) {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return app.JobInsertParams{}, err
	}
	return decodeSubmit(body, r.Header.Get("Idempotency-Key"), h.cfg.MaxPayloadBytes)
}

// ---- reading ----

// getJob handles GET /jobs/{id}.
func (h *API) getJob(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	j, err := h.app.JobGet(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, j)
	return nil
}

// listJobs handles GET /jobs?status=&name=&queue=&limit=&cursor=.
func (h *API) listJobs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := app.JobListParams{Name: q.Get("name"), Queue: q.Get("queue"), State: job.State(q.Get("status"))}
	var err error
	if p.Limit, p.Before, err = queryPage(r); err != nil {
		return err
	}
	resp, err := h.app.JobList(r.Context(), p)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// getJobTimeline handles GET /jobs/{id}/timeline: the row, its job_events
// and its audit rows, which the store reads in one round trip and
// job.BuildTimeline, a pure function, assembles. Nothing on the lease,
// completion or heartbeat path writes a row for it
// (docs/state_machine.md, "What a job remembers of its attempts").
func (h *API) getJobTimeline(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	t, err := h.app.JobTimeline(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, t)
	return nil
}

// listScheduled handles GET /jobs/scheduled?limit=&cursor=.
func (h *API) listScheduled(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	resp, err := h.app.ScheduledList(r.Context(), limit, r.URL.Query().Get("cursor"))
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// stats handles GET /stats.
func (h *API) stats(w http.ResponseWriter, r *http.Request) error {
	resp, err := h.app.Stats(r.Context())
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// ---- actions ----

// cancelJob handles POST /jobs/{id}/cancel (admin; audited): 200 with
// the job's new state, or 202 when it runs and its worker was asked to
// stop.
func (h *API) cancelJob(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	resp, err := h.app.JobCancel(r.Context(), id)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if resp.CancelRequested {
		status = http.StatusAccepted
	}
	httpx.WriteJSON(w, status, resp)
	return nil
}

// runNow handles POST /jobs/{id}/run_now (admin; audited).
func (h *API) runNow(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	resp, err := h.app.JobRunNow(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// deleteJob handles DELETE /jobs/{id} (admin; audited): it deletes a job
// that is completed, failed or canceled.
func (h *API) deleteJob(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	resp, err := h.app.JobDelete(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// bulkJobs handles POST /jobs/bulk (admin; audited unless a dry run). A
// bulk action takes the filters of GET /jobs; the store walks the jobs
// they select a batch (store.DefaultBulkBatch) per transaction.
func (h *API) bulkJobs(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	var req wire.BulkRequest
	if err := httpx.DecodeStrict(body, &req); err != nil {
		return err
	}
	if req.Background || req.Queue != "" || req.Fingerprint != "" {
		return h.bulkBackground(w, r, req) // operations.go
	}
	resp, err := h.app.JobBulk(r.Context(), req)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}
