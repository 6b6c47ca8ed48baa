package api

import (
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the /limits routes. Reading needs the read scope; a
// change needs admin and is audited (app's limits.go).

// pathKey returns the {key} route parameter, unescaped (chi matches the
// escaped path when the request had escapes Go does not make itself, such
// as %2F).
func pathKey(r *http.Request) (string, error) {
	raw := chi.URLParam(r, "key")
	if r.URL.RawPath == "" {
		return raw, nil
	}
	key, err := url.PathUnescape(raw)
	if err != nil {
		return "", httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidLimit, "key: is not a valid escaped path segment")
	}
	return key, nil
}

// listLimits handles GET /limits.
func (h *API) listLimits(w http.ResponseWriter, r *http.Request) error {
	resp, err := h.app.Limits(r.Context())
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// putLimit handles PUT /limits/{key} {"concurrency": N, "rate": N,
// "period_seconds": S} (admin; audited).
func (h *API) putLimit(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	var req wire.LimitUpdateRequest
	if err := decodeObject(body, &req); err != nil {
		return err
	}
	info, err := h.app.LimitSet(r.Context(), key, req)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, info)
	return nil
}

// deleteLimit handles DELETE /limits/{key} (admin; audited).
func (h *API) deleteLimit(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	if err := h.app.LimitDelete(r.Context(), key); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
