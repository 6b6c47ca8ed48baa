package app

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the actions on jobs: cancel, run now, delete, the
// bulk actions that run in the request (operations.go runs the others),
// and the page of jobs waiting for a later run time.

// ScheduledList returns a page of the jobs whose run time is ahead,
// soonest first, from cursor (a next_cursor; "" for the first page).
func (a *App) ScheduledList(ctx context.Context, limit int, cursor string) (wire.ScheduledJobsResponse, error) {
	var after *store.ScheduledCursor
	if cursor != "" {
		c, err := parseScheduledCursor(cursor)
		if err != nil {
			return wire.ScheduledJobsResponse{}, httpx.InvalidField("cursor", "not a cursor from next_cursor")
		}
		after = &c
	}
	jobs, next, err := a.store.JobListScheduled(ctx, limit, after)
	if err != nil {
		return wire.ScheduledJobsResponse{}, a.storeError(storeOpScheduled, err)
	}
	resp := wire.ScheduledJobsResponse{Jobs: make([]wire.Job, len(jobs))}
	for i, j := range jobs {
		resp.Jobs[i] = jobView(j)
	}
	if next != nil {
		c := strconv.FormatInt(next.NextRunAt.UnixMicro(), 10) + "-" + formatID(next.ID)
		resp.NextCursor = &c
	}
	return resp, nil
}

// parseScheduledCursor reads "<unix microseconds>-<id>".
func parseScheduledCursor(s string) (store.ScheduledCursor, error) {
	at, id, ok := strings.Cut(s, "-")
	if !ok {
		return store.ScheduledCursor{}, strconv.ErrSyntax
	}
	us, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return store.ScheduledCursor{}, err
	}
	n, err := ParseID(id)
	if err != nil {
		return store.ScheduledCursor{}, err
	}
	return store.ScheduledCursor{NextRunAt: time.UnixMicro(us), ID: n}, nil
}

// JobRunNow makes a job waiting for a later run time due now (audited)
// and wakes the coordinator.
func (a *App) JobRunNow(ctx context.Context, id int64) (wire.SubmitResponse, error) {
	done, err := a.audit(ctx, store.AuditJobRunNow, store.AuditTargetJob, formatID(id))
	if err != nil {
		return wire.SubmitResponse{}, err
	}
	if err := a.store.JobRunNow(ctx, id); err != nil {
		done(failure(err))
		return wire.SubmitResponse{}, a.storeError(storeOpRunNow, err)
	}
	done(map[string]any{"result": "ok"})
	a.wake()
	return wire.SubmitResponse{JobID: formatID(id), Status: string(job.StatePending)}, nil
}

// JobCancel cancels a job as POST /jobs/{id}/cancel does (audited): a
// running one by recording the request and telling its worker.
func (a *App) JobCancel(ctx context.Context, id int64) (wire.SubmitResponse, error) {
	done, err := a.audit(ctx, store.AuditJobCancel, store.AuditTargetJob, formatID(id))
	if err != nil {
		return wire.SubmitResponse{}, err
	}
	res, err := a.store.JobCancel(ctx, id)
	if err != nil {
		done(failure(err))
		return wire.SubmitResponse{}, a.storeError(storeOpCancel, err)
	}
	if res.State != job.StateLeased {
		done(map[string]any{"result": "ok", "state": string(res.State)})
		return wire.SubmitResponse{JobID: formatID(id), Status: string(res.State)}, nil
	}
	done(map[string]any{"result": "ok", "state": string(job.StateLeased), "cancel_requested": true, "worker_id": res.WorkerID})
	a.tellCanceled(ctx, []store.LeasedCancel{{JobID: id, WorkerID: res.WorkerID, LeaseToken: res.LeaseToken}})
	return wire.SubmitResponse{JobID: formatID(id), Status: string(job.StateLeased), CancelRequested: true}, nil
}

// bulkStates are the states each bulk action applies to: those its
// one-job route accepts.
var bulkStates = map[string][]job.State{
	wire.BulkCancel:  {job.StateWaiting, job.StatePending, job.StateRetrying, job.StateLeased},
	wire.BulkRequeue: {job.StateFailed},
	wire.BulkDelete:  {job.StateCompleted, job.StateFailed, job.StateCanceled},
}

// JobDelete deletes a finished job (completed, failed or canceled) and its
// events (audited); the console's Job page calls it too.
func (a *App) JobDelete(ctx context.Context, id int64) (wire.SubmitResponse, error) {
	done, err := a.audit(ctx, store.AuditJobDelete, store.AuditTargetJob, formatID(id))
	if err != nil {
		return wire.SubmitResponse{}, err
	}
	state, err := a.store.JobDelete(ctx, id)
	if err != nil {
		done(failure(err))
		return wire.SubmitResponse{}, a.storeError(storeOpDelete, err)
	}
	done(map[string]any{"result": "ok", "state": string(state)})
	return wire.SubmitResponse{JobID: formatID(id), Status: wire.StatusDeleted}, nil
}

// JobBulk runs a bulk action on the jobs req's filters (those of GET
// /jobs) select, in the request, a batch per transaction (audited unless
// a dry run or nothing matched). Requests with background, queue or
// fingerprint go to BulkStart and BulkCount instead.
func (a *App) JobBulk(ctx context.Context, req wire.BulkRequest) (wire.BulkResponse, error) {
	states, ok := bulkStates[req.Action]
	if !ok {
		return wire.BulkResponse{}, httpx.InvalidField("action", "must be one of %s, %s, %s", wire.BulkCancel, wire.BulkRequeue, wire.BulkDelete)
	}
	p := store.JobBulkParams{States: states, Name: req.Name, Actor: httpx.PrincipalFrom(ctx).Actor()}
	if req.Status != "" {
		st := job.State(req.Status)
		if !slices.Contains(states, st) {
			return wire.BulkResponse{}, httpx.InvalidField("status", "%s applies to %s", req.Action, statesOf(states))
		}
		p.States = []job.State{st}
	}
	if req.Name != "" {
		if msg := CheckText(req.Name, maxNameLen); msg != "" {
			return wire.BulkResponse{}, httpx.InvalidField("name", "%s", msg)
		}
	}
	skipRequested := req.Action == wire.BulkCancel
	matched, err := a.store.JobBulkCount(ctx, p, skipRequested)
	if err != nil {
		return wire.BulkResponse{}, a.storeError(storeOpBulk, err)
	}
	resp := wire.BulkResponse{Action: req.Action, DryRun: req.DryRun, Matched: matched}
	if req.DryRun || matched == 0 {
		return resp, nil
	}
	done, err := a.audit(ctx, store.AuditJobBulk, store.AuditTargetJob, req.Action)
	if err != nil {
		return wire.BulkResponse{}, err
	}
	var leased []store.LeasedCancel
	switch req.Action {
	case wire.BulkCancel:
		resp.Affected, leased, err = a.store.JobBulkCancel(ctx, p)
	case wire.BulkRequeue:
		resp.Affected, err = a.store.JobBulkRequeue(ctx, p)
	case wire.BulkDelete:
		resp.Affected, err = a.store.JobBulkDelete(ctx, p)
	}
	filters := map[string]any{"status": req.Status, "name": req.Name, "matched": matched, "affected": resp.Affected}
	if err != nil {
		out := failure(err)
		for k, v := range filters {
			out[k] = v
		}
		done(out) // the batches committed before the error stay done
		return wire.BulkResponse{}, a.storeError(storeOpBulk, err)
	}
	filters["result"] = "ok"
	done(filters)
	if req.Action == wire.BulkRequeue && resp.Affected > 0 {
		a.wake()
	}
	a.tellCanceled(ctx, leased)
	return resp, nil
}

// tellCanceled tells the workers of running jobs whose cancel was recorded
// (best effort, as cancelJob does: the jobs end canceled either way).
func (a *App) tellCanceled(ctx context.Context, leased []store.LeasedCancel) {
	if len(leased) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bestEffortTimeout)
	defer cancel()
	for _, l := range leased {
		ctl := wire.Control{Op: wire.OpCancel, JobID: l.JobID, LeaseToken: l.LeaseToken, Reason: job.ReasonCanceled}
		if err := a.queue.SendControl(ctx, l.WorkerID, ctl); err != nil {
			a.metrics.countRedisError(redisOpSendControl)
			a.logger.WarnContext(ctx, "send cancel to worker", "job_id", l.JobID, "worker_id", l.WorkerID, "error", err)
			if ctx.Err() != nil {
				return
			}
		}
	}
}

func statesOf(states []job.State) string {
	out := ""
	for i, st := range states {
		if i > 0 {
			out += ", "
		}
		out += string(st)
	}
	return out
}
