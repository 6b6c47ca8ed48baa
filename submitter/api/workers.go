package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/app"
)

// This file holds GET /workers and GET /workers/{id} (read) and POST
// /workers/{id}/drain and /undrain (admin; audited).

// listWorkers handles GET /workers.
func (h *API) listWorkers(w http.ResponseWriter, r *http.Request) error {
	ws, err := h.app.WorkerList(r.Context())
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, wire.WorkerListResponse{Workers: ws})
	return nil
}

// drainWorker handles POST /workers/{id}/drain (admin; audited).
func (h *API) drainWorker(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	if msg := app.CheckText(id, maxWorkerIDLen); msg != "" {
		return httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "worker id: %s", msg)
	}
	wk, err := h.app.WorkerDrain(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, wk)
	return nil
}

// undrainWorker handles POST /workers/{id}/undrain (admin; audited).
func (h *API) undrainWorker(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	if msg := app.CheckText(id, maxWorkerIDLen); msg != "" {
		return httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "worker id: %s", msg)
	}
	wk, err := h.app.WorkerUndrain(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, wk)
	return nil
}

// getWorker handles GET /workers/{id}.
func (h *API) getWorker(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	if msg := app.CheckText(id, maxWorkerIDLen); msg != "" {
		return httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "worker id: %s", msg)
	}
	wk, err := h.app.WorkerGet(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, wk)
	return nil
}

// maxWorkerIDLen is the longest worker id (worker.Config.ID's bound).
const maxWorkerIDLen = 200
