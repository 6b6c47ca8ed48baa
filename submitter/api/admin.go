package api

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/app"
)

// This file holds the admin routes: API keys and the audit log.

// createToken handles POST /admin/tokens (admin; audited).
func (h *API) createToken(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	var req wire.TokenRequest
	if err := httpx.DecodeStrict(body, &req); err != nil {
		return err
	}
	ttl := app.DefaultTokenTTL
	if req.TTL != nil {
		if ttl, err = time.ParseDuration(*req.TTL); err != nil {
			return httpx.InvalidField("ttl", "not a duration such as \"720h\"")
		}
	}
	created, err := h.app.TokenCreate(r.Context(), req.Name, req.Scopes, ttl)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusCreated, created)
	return nil
}

// listTokens handles GET /admin/tokens (admin).
func (h *API) listTokens(w http.ResponseWriter, r *http.Request) error {
	tokens, err := h.app.TokenList(r.Context())
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, wire.TokenListResponse{Tokens: tokens})
	return nil
}

// revokeToken handles DELETE /admin/tokens/{id} (admin; audited).
func (h *API) revokeToken(w http.ResponseWriter, r *http.Request) error {
	id, err := app.ParseID(chi.URLParam(r, "id"))
	if err != nil {
		return httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "token id must be a positive integer")
	}
	t, err := h.app.TokenRevoke(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, t)
	return nil
}

// listAudit handles GET /admin/audit?limit=&cursor= (admin).
func (h *API) listAudit(w http.ResponseWriter, r *http.Request) error {
	limit, before, err := queryPage(r)
	if err != nil {
		return err
	}
	resp, err := h.app.AuditList(r.Context(), limit, before)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}
