package submitter

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the admin routes: API keys (through TokenAdmin) and
// the audit log.

// The admin routes' bodies live in internal/wire, which the Go client
// shares; these names stay for the submitter's callers.
type (
	TokenRequest      = wire.TokenRequest
	TokenListResponse = wire.TokenListResponse
	AuditEntry        = wire.AuditEntry
	AuditListResponse = wire.AuditListResponse
)

// createToken handles POST /admin/tokens (admin; audited).
func (s *Server) createToken(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	var req TokenRequest
	if err := httpx.DecodeStrict(body, &req); err != nil {
		return err
	}
	ttl := DefaultTokenTTL
	if req.TTL != nil {
		if ttl, err = time.ParseDuration(*req.TTL); err != nil {
			return httpx.InvalidField("ttl", "not a duration such as \"720h\"")
		}
	}
	created, err := s.tokens.Create(r.Context(), httpx.PrincipalFrom(r.Context()).Actor(), req.Name, req.Scopes, ttl)
	if err != nil {
		return s.storeError(storeOpTokenCreate, err)
	}
	httpx.WriteJSON(w, http.StatusCreated, created)
	return nil
}

// listTokens handles GET /admin/tokens (admin).
func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) error {
	tokens, err := s.tokens.List(r.Context())
	if err != nil {
		return s.storeError(storeOpTokenList, err)
	}
	httpx.WriteJSON(w, http.StatusOK, TokenListResponse{Tokens: tokens})
	return nil
}

// revokeToken handles DELETE /admin/tokens/{id} (admin; audited).
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	id, err := parseID(chi.URLParam(r, "id"))
	if err != nil {
		return httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "token id must be a positive integer")
	}
	t, err := s.tokens.Revoke(r.Context(), httpx.PrincipalFrom(r.Context()).Actor(), id)
	if err != nil {
		return s.storeError(storeOpTokenRevoke, err)
	}
	httpx.WriteJSON(w, http.StatusOK, t)
	return nil
}

// listAudit handles GET /admin/audit?limit=&cursor= (admin).
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	limit, before, err := queryPage(r)
	if err != nil {
		return err
	}
	entries, next, err := s.store.AuditList(r.Context(), limit, before)
	if err != nil {
		return s.storeError(storeOpAuditList, err)
	}
	resp := AuditListResponse{Entries: make([]AuditEntry, len(entries))}
	for i, e := range entries {
		resp.Entries[i] = AuditEntry{ID: formatID(e.ID), At: e.At.UTC(), Actor: e.Actor, Action: e.Action,
			TargetType: e.TargetType, TargetID: e.TargetID, Details: e.Details}
	}
	if next > 0 {
		c := formatID(next)
		resp.NextCursor = &c
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}
