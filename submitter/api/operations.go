package api

import (
	"net/http"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/app"
)

// This file holds background bulk operations (app's operations.go runs
// them): POST /jobs/bulk with background, GET /operations[/{id}] (read)
// and POST /operations/{id}/cancel (admin; audited).

// listOperations handles GET /operations (read): the newest 50.
func (h *API) listOperations(w http.ResponseWriter, r *http.Request) error {
	ops, err := h.app.OperationList(r.Context())
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, wire.OperationListResponse{Operations: ops})
	return nil
}

// getOperation handles GET /operations/{id} (read).
func (h *API) getOperation(w http.ResponseWriter, r *http.Request) error {
	id, err := operationID(r)
	if err != nil {
		return err
	}
	op, err := h.app.OperationGet(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, op)
	return nil
}

// cancelOperation handles POST /operations/{id}/cancel (admin; audited).
func (h *API) cancelOperation(w http.ResponseWriter, r *http.Request) error {
	id, err := operationID(r)
	if err != nil {
		return err
	}
	op, err := h.app.OperationCancel(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, op)
	return nil
}

func operationID(r *http.Request) (int64, error) {
	id, err := pathID(r)
	if err != nil {
		return 0, httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "operation id must be a positive integer")
	}
	return id, nil
}

// bulkBackground answers the POST /jobs/bulk requests that bulkJobs hands
// over: background ones, and those filtering by queue or fingerprint
// (which only the background path applies; a dry run of one counts).
func (h *API) bulkBackground(w http.ResponseWriter, r *http.Request, req wire.BulkRequest) error {
	switch {
	case req.DryRun:
		n, err := h.app.BulkCount(r.Context(), req)
		if err != nil {
			return err
		}
		httpx.WriteJSON(w, http.StatusOK, wire.BulkResponse{Action: req.Action, DryRun: true, Matched: n, Background: req.Background})
		return nil
	case !req.Background:
		if err := app.CheckBulk(req); err != nil {
			return err
		}
		if req.Queue == "" {
			return httpx.InvalidField("fingerprint", "a bulk action by fingerprint runs in the background: add \"background\": true")
		}
		return httpx.InvalidField("queue", "a bulk action by queue runs in the background: add \"background\": true")
	}
	resp, err := h.app.BulkStart(r.Context(), req)
	if err != nil {
		return err
	}
	resp.Background = true
	status := http.StatusAccepted
	if resp.OperationID == "" {
		status = http.StatusOK // nothing matched: nothing to run
	}
	httpx.WriteJSON(w, status, resp)
	return nil
}
