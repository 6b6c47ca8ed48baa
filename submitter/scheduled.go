package submitter

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the jobs that wait for a later run time: GET
// /jobs/scheduled (read), POST /jobs/{id}/run_now (admin; audited), and
// the service calls the console's Scheduled page makes (with the
// schedules of GET /schedules, and cancel).

// listScheduled handles GET /jobs/scheduled?limit=&cursor=.
func (s *Server) listScheduled(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	resp, err := s.svc.ScheduledList(r.Context(), limit, r.URL.Query().Get("cursor"))
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// runNow handles POST /jobs/{id}/run_now (admin; audited).
func (s *Server) runNow(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	resp, err := s.svc.JobRunNow(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// ScheduledList returns a page of the jobs whose run time is ahead,
// soonest first, from cursor (a next_cursor; "" for the first page).
func (v service) ScheduledList(ctx context.Context, limit int, cursor string) (wire.ScheduledJobsResponse, error) {
	var after *store.ScheduledCursor
	if cursor != "" {
		c, err := parseScheduledCursor(cursor)
		if err != nil {
			return wire.ScheduledJobsResponse{}, httpx.InvalidField("cursor", "not a cursor from next_cursor")
		}
		after = &c
	}
	jobs, next, err := v.s.store.JobListScheduled(ctx, limit, after)
	if err != nil {
		return wire.ScheduledJobsResponse{}, v.s.storeError(storeOpScheduled, err)
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
	n, err := parseID(id)
	if err != nil {
		return store.ScheduledCursor{}, err
	}
	return store.ScheduledCursor{NextRunAt: time.UnixMicro(us), ID: n}, nil
}

// ScheduleList returns a page of the cron schedules, newest first, as GET
// /schedules does.
func (v service) ScheduleList(ctx context.Context, limit int, cursor string) (wire.ScheduleListResponse, error) {
	var before int64
	if cursor != "" {
		var err error
		if before, err = parseID(cursor); err != nil {
			return wire.ScheduleListResponse{}, httpx.InvalidField("cursor", "not a cursor from next_cursor")
		}
	}
	scs, next, err := v.s.store.ScheduleList(ctx, limit, before)
	if err != nil {
		return wire.ScheduleListResponse{}, v.s.storeError(storeOpScheduleRead, err)
	}
	resp := wire.ScheduleListResponse{Schedules: make([]wire.Schedule, len(scs))}
	for i, sc := range scs {
		resp.Schedules[i] = scheduleView(sc)
	}
	if next > 0 {
		c := formatID(next)
		resp.NextCursor = &c
	}
	return resp, nil
}

// JobRunNow makes a job waiting for a later run time due now (audited)
// and wakes the coordinator.
func (v service) JobRunNow(ctx context.Context, id int64) (wire.SubmitResponse, error) {
	done, err := v.s.audit(ctx, store.AuditJobRunNow, store.AuditTargetJob, formatID(id))
	if err != nil {
		return wire.SubmitResponse{}, err
	}
	if err := v.s.store.JobRunNow(ctx, id); err != nil {
		done(failure(err))
		return wire.SubmitResponse{}, v.s.storeError(storeOpRunNow, err)
	}
	done(map[string]any{"result": "ok"})
	v.s.wake()
	return wire.SubmitResponse{JobID: formatID(id), Status: string(job.StatePending)}, nil
}

// JobCancel cancels a job as POST /jobs/{id}/cancel does (audited): a
// running one by recording the request and telling its worker.
func (v service) JobCancel(ctx context.Context, id int64) (wire.SubmitResponse, error) {
	done, err := v.s.audit(ctx, store.AuditJobCancel, store.AuditTargetJob, formatID(id))
	if err != nil {
		return wire.SubmitResponse{}, err
	}
	res, err := v.s.store.JobCancel(ctx, id)
	if err != nil {
		done(failure(err))
		return wire.SubmitResponse{}, v.s.storeError(storeOpCancel, err)
	}
	if res.State != job.StateLeased {
		done(map[string]any{"result": "ok", "state": string(res.State)})
		return wire.SubmitResponse{JobID: formatID(id), Status: string(res.State)}, nil
	}
	done(map[string]any{"result": "ok", "state": string(job.StateLeased), "cancel_requested": true, "worker_id": res.WorkerID})
	v.s.tellCanceled(ctx, []store.LeasedCancel{{JobID: id, WorkerID: res.WorkerID, LeaseToken: res.LeaseToken}})
	return wire.SubmitResponse{JobID: formatID(id), Status: string(job.StateLeased), CancelRequested: true}, nil
}
