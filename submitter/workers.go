package submitter

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds GET /workers and GET /workers/{id} (read) and POST
// /workers/{id}/drain and /undrain (admin; audited): the fleet as
// the leader coordinator last wrote it to the workers table, so the
// submitter answers without asking the coordinator (whose own /workers
// shows its live registry).

// listWorkers handles GET /workers.
func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.svc.WorkerList(r.Context())
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, wire.WorkerListResponse{Workers: ws})
	return nil
}

// WorkerList returns every recorded worker with the jobs it holds leased.
func (v service) WorkerList(ctx context.Context) ([]wire.Worker, error) {
	rows, err := v.s.store.WorkerList(ctx)
	if err != nil {
		return nil, v.s.storeError(storeOpWorkers, err)
	}
	leased, err := v.s.store.WorkerLeasedJobs(ctx)
	if err != nil {
		return nil, v.s.storeError(storeOpWorkers, err)
	}
	out := make([]wire.Worker, len(rows))
	for i, row := range rows {
		out[i] = workerView(row, leased[row.ID])
	}
	return out, nil
}

// drainWorker handles POST /workers/{id}/drain (admin; audited).
func (s *Server) drainWorker(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	if msg := checkText(id, maxWorkerIDLen); msg != "" {
		return httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "worker id: %s", msg)
	}
	wk, err := s.svc.WorkerDrain(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, wk)
	return nil
}

// undrainWorker handles POST /workers/{id}/undrain (admin; audited).
func (s *Server) undrainWorker(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	if msg := checkText(id, maxWorkerIDLen); msg != "" {
		return httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "worker id: %s", msg)
	}
	wk, err := s.svc.WorkerUndrain(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, wk)
	return nil
}

// WorkerDrain asks that a worker get no new jobs (audited): the leader
// coordinator reads the request at its next worker sync (within a
// heartbeat interval) and leases nothing more to it; its running jobs
// finish. The worker keeps running, idle, until it is stopped. The
// request stands through the worker's crashes and restarts under the same
// id until WorkerUndrain.
func (v service) WorkerDrain(ctx context.Context, id string) (wire.Worker, error) {
	return v.workerDrainSet(ctx, id, true)
}

// WorkerUndrain withdraws an operator's drain request (audited): from the
// leader's next worker sync the worker gets jobs again. A worker not asked
// to drain is left as it is; a worker that drains itself (SIGTERM) goes on
// stopping.
func (v service) WorkerUndrain(ctx context.Context, id string) (wire.Worker, error) {
	return v.workerDrainSet(ctx, id, false)
}

func (v service) workerDrainSet(ctx context.Context, id string, drain bool) (wire.Worker, error) {
	action := store.AuditWorkerUndrain
	if drain {
		action = store.AuditWorkerDrain
	}
	done, err := v.s.audit(ctx, action, store.AuditTargetWorker, id)
	if err != nil {
		return wire.Worker{}, err
	}
	var row store.WorkerRow
	if drain {
		row, err = v.s.store.WorkerDrain(ctx, id, httpx.PrincipalFrom(ctx).Actor())
	} else {
		row, err = v.s.store.WorkerUndrain(ctx, id)
	}
	if err != nil {
		done(failure(err))
		if isNotFound(err) {
			return wire.Worker{}, httpx.Errorf(http.StatusNotFound, wire.CodeNotFound, "no such worker")
		}
		return wire.Worker{}, v.s.storeError(storeOpDrain, err)
	}
	done(map[string]any{"result": "ok", "state": row.State})
	return workerView(row, nil), nil
}

// getWorker handles GET /workers/{id}.
func (s *Server) getWorker(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	if msg := checkText(id, maxWorkerIDLen); msg != "" {
		return httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "worker id: %s", msg)
	}
	row, err := s.store.WorkerGet(r.Context(), id)
	if err != nil {
		return s.storeError(storeOpWorkers, err)
	}
	leased, err := s.store.WorkerLeasedJobs(r.Context())
	if err != nil {
		return s.storeError(storeOpWorkers, err)
	}
	httpx.WriteJSON(w, http.StatusOK, workerView(row, leased[row.ID]))
	return nil
}

// maxWorkerIDLen is the longest worker id (worker.Config.ID's bound).
const maxWorkerIDLen = 200

func workerView(row store.WorkerRow, leased []int64) wire.Worker {
	v := wire.Worker{WorkerID: row.ID, State: row.State, JobTypes: row.JobTypes, Concurrency: row.Concurrency,
		InFlight: row.InFlight, LastHeartbeatAt: row.LastHeartbeatAt.UTC(), LastAssignedAt: optTime(row.LastAssignedAt),
		Host: row.Host, Version: row.Version, DrainRequestedAt: optTime(row.DrainRequestedAt),
		DrainRequestedBy: row.DrainRequestedBy, LeasedJobs: make([]string, len(leased))}
	for i, id := range leased {
		v.LeasedJobs[i] = formatID(id)
	}
	if v.JobTypes == nil {
		v.JobTypes = []string{}
	}
	return v
}
