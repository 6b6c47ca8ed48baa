package submitter

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds GET /workers and GET /workers/{id} (read): the fleet as
// the leader coordinator last wrote it to the workers table, so the
// submitter answers without asking the coordinator (whose own /workers
// shows its live registry).

// listWorkers handles GET /workers.
func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) error {
	rows, err := s.store.WorkerList(r.Context())
	if err != nil {
		return s.storeError(storeOpWorkers, err)
	}
	resp := wire.WorkerListResponse{Workers: make([]wire.Worker, len(rows))}
	for i, row := range rows {
		resp.Workers[i] = workerView(row)
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
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
	httpx.WriteJSON(w, http.StatusOK, workerView(row))
	return nil
}

// maxWorkerIDLen is the longest worker id (worker.Config.ID's bound).
const maxWorkerIDLen = 200

func workerView(row store.WorkerRow) wire.Worker {
	v := wire.Worker{WorkerID: row.ID, State: row.State, JobTypes: row.JobTypes, Concurrency: row.Concurrency,
		InFlight: row.InFlight, LastHeartbeatAt: row.LastHeartbeatAt.UTC(), LastAssignedAt: optTime(row.LastAssignedAt)}
	if v.JobTypes == nil {
		v.JobTypes = []string{}
	}
	return v
}
