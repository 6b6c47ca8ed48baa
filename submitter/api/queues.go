package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the /queues routes. Reading needs the read scope; a
// pause, a resume or a cap needs admin and is audited (app's queues.go).

// listQueues handles GET /queues.
func (h *API) listQueues(w http.ResponseWriter, r *http.Request) error {
	resp, err := h.app.Queues(r.Context())
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// pauseQueue handles POST /queues/{name}/pause (admin; audited).
func (h *API) pauseQueue(w http.ResponseWriter, r *http.Request) error {
	q, err := h.app.QueueSetPaused(r.Context(), chi.URLParam(r, "name"), true)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, q)
	return nil
}

// resumeQueue handles POST /queues/{name}/resume (admin; audited).
func (h *API) resumeQueue(w http.ResponseWriter, r *http.Request) error {
	q, err := h.app.QueueSetPaused(r.Context(), chi.URLParam(r, "name"), false)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, q)
	return nil
}

// updateQueue handles PUT and POST /queues/{name} {"concurrency": N}
// (admin; audited).
func (h *API) updateQueue(w http.ResponseWriter, r *http.Request) error {
	name := chi.URLParam(r, "name")
	if !wire.ValidQueueName(name) {
		return httpx.InvalidField("name", "a queue name is 1 to %d characters from A-Z a-z 0-9 _ . : -", wire.MaxQueueNameLen)
	}
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	var req wire.QueueUpdateRequest
	if err := decodeObject(body, &req); err != nil {
		return err
	}
	if req.Concurrency == nil {
		return httpx.InvalidField("concurrency", "required: the most jobs of the queue leased at once, 0 for no cap")
	}
	if n := *req.Concurrency; n < 0 || n > wire.MaxQueueConcurrency {
		return httpx.InvalidField("concurrency", "must be between 0 (no cap) and %d", wire.MaxQueueConcurrency)
	}
	q, err := h.app.QueueSetConcurrency(r.Context(), name, *req.Concurrency)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, q)
	return nil
}
