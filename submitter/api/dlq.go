package api

import (
	"bytes"
	"net/http"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the dead-letter queue: GET /dlq and POST
// /dlq/{id}/requeue (admin; audited).

// listDead handles GET /dlq?queue=&limit=&cursor=.
func (h *API) listDead(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	resp, err := h.app.DeadList(r.Context(), q.Get("queue"), limit, q.Get("cursor"))
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// requeueDead handles POST /dlq/{id}/requeue (admin; audited). The body
// is optional: {"payload": ...} replaces the job's payload.
func (h *API) requeueDead(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	var req wire.RequeueRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeObject(body, &req); err != nil {
			return err
		}
	}
	resp, err := h.app.DeadRequeue(r.Context(), id, req.Payload)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}
