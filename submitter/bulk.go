package submitter

import (
	"context"
	"net/http"
	"slices"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the routes that remove jobs and act on many at once:
// DELETE /jobs/{id} and POST /jobs/bulk (admin; audited like cancel and
// requeue). A bulk action takes the filters of GET /jobs; the store walks
// the jobs they select a batch (store.DefaultBulkBatch) per transaction.

// bulkStates are the states each bulk action applies to: those its
// one-job route accepts.
var bulkStates = map[string][]job.State{
	wire.BulkCancel:  {job.StateWaiting, job.StatePending, job.StateRetrying, job.StateLeased},
	wire.BulkRequeue: {job.StateFailed},
	wire.BulkDelete:  {job.StateCompleted, job.StateFailed, job.StateCanceled},
}

// deleteJob handles DELETE /jobs/{id} (admin; audited): it deletes a job
// that is completed, failed or canceled.
func (s *Server) deleteJob(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	resp, err := s.svc.JobDelete(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// JobDelete deletes a finished job (completed, failed or canceled) and its
// events (audited); the console's Job page calls it too.
func (v service) JobDelete(ctx context.Context, id int64) (wire.SubmitResponse, error) {
	done, err := v.s.audit(ctx, store.AuditJobDelete, store.AuditTargetJob, formatID(id))
	if err != nil {
		return wire.SubmitResponse{}, err
	}
	state, err := v.s.store.JobDelete(ctx, id)
	if err != nil {
		done(failure(err))
		return wire.SubmitResponse{}, v.s.storeError(storeOpDelete, err)
	}
	done(map[string]any{"result": "ok", "state": string(state)})
	return wire.SubmitResponse{JobID: formatID(id), Status: wire.StatusDeleted}, nil
}

// bulkJobs handles POST /jobs/bulk (admin; audited unless a dry run).
func (s *Server) bulkJobs(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	var req wire.BulkRequest
	if err := httpx.DecodeStrict(body, &req); err != nil {
		return err
	}
	if req.Background || req.Queue != "" || req.Fingerprint != "" {
		return s.bulkBackground(w, r, req) // operations.go
	}
	states, ok := bulkStates[req.Action]
	if !ok {
		return httpx.InvalidField("action", "must be one of %s, %s, %s", wire.BulkCancel, wire.BulkRequeue, wire.BulkDelete)
	}
	p := store.JobBulkParams{States: states, Name: req.Name, Actor: httpx.PrincipalFrom(r.Context()).Actor()}
	if req.Status != "" {
		st := job.State(req.Status)
		if !slices.Contains(states, st) {
			return httpx.InvalidField("status", "%s applies to %s", req.Action, statesOf(states))
		}
		p.States = []job.State{st}
	}
	if req.Name != "" {
		if msg := checkText(req.Name, maxNameLen); msg != "" {
			return httpx.InvalidField("name", "%s", msg)
		}
	}
	skipRequested := req.Action == wire.BulkCancel
	matched, err := s.store.JobBulkCount(r.Context(), p, skipRequested)
	if err != nil {
		return s.storeError(storeOpBulk, err)
	}
	resp := wire.BulkResponse{Action: req.Action, DryRun: req.DryRun, Matched: matched}
	if req.DryRun || matched == 0 {
		httpx.WriteJSON(w, http.StatusOK, resp)
		return nil
	}
	done, err := s.audit(r.Context(), store.AuditJobBulk, store.AuditTargetJob, req.Action)
	if err != nil {
		return err
	}
	var leased []store.LeasedCancel
	switch req.Action {
	case wire.BulkCancel:
		resp.Affected, leased, err = s.store.JobBulkCancel(r.Context(), p)
	case wire.BulkRequeue:
		resp.Affected, err = s.store.JobBulkRequeue(r.Context(), p)
	case wire.BulkDelete:
		resp.Affected, err = s.store.JobBulkDelete(r.Context(), p)
	}
	filters := map[string]any{"status": req.Status, "name": req.Name, "matched": matched, "affected": resp.Affected}
	if err != nil {
		out := failure(err)
		for k, v := range filters {
			out[k] = v
		}
		done(out) // the batches committed before the error stay done
		return s.storeError(storeOpBulk, err)
	}
	filters["result"] = "ok"
	done(filters)
	if req.Action == wire.BulkRequeue && resp.Affected > 0 {
		s.wake()
	}
	s.tellCanceled(r.Context(), leased)
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// tellCanceled tells the workers of running jobs whose cancel was recorded
// (best effort, as cancelJob does: the jobs end canceled either way).
func (s *Server) tellCanceled(ctx context.Context, leased []store.LeasedCancel) {
	if len(leased) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bestEffortTimeout)
	defer cancel()
	for _, l := range leased {
		ctl := wire.Control{Op: wire.OpCancel, JobID: l.JobID, LeaseToken: l.LeaseToken, Reason: job.ReasonCanceled}
		if err := s.queue.SendControl(ctx, l.WorkerID, ctl); err != nil {
			s.metrics.countRedisError(redisOpSendControl)
			s.logger.WarnContext(ctx, "send cancel to worker", "job_id", l.JobID, "worker_id", l.WorkerID, "error", err)
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
