package submitter

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the admin routes (API keys and the audit log), the
// TokenAdmin that the token subcommands share with them, and the audit
// helper of every admin action.

// TokenRequest is the body of POST /admin/tokens.
type TokenRequest struct {
	// Name says what the key is for: 1..128 characters, no control characters.
	Name string `json:"name"`
	// Scopes are one or more of submit, read, admin.
	Scopes []string `json:"scopes"`
	// TTL is how long the key lives, as a Go duration ("720h"). Absent:
	// DefaultTokenTTL; "0": it never expires.
	TTL *string `json:"ttl,omitempty"`
}

// Token is an API key as the API shows it: never the key, never its hash.
type Token struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scopes     []string   `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// TokenCreated answers POST /admin/tokens: the new key's facts and, this
// once, the key itself. Nothing can show it again.
type TokenCreated struct {
	Token
	Key string `json:"key"`
}

// TokenListResponse answers GET /admin/tokens, newest first.
type TokenListResponse struct {
	Tokens []Token `json:"tokens"`
}

// AuditEntry is one audit log row as GET /admin/audit shows it.
type AuditEntry struct {
	ID         string          `json:"id"`
	At         time.Time       `json:"at"`
	Actor      string          `json:"actor"`
	Action     string          `json:"action"`
	TargetType string          `json:"target_type"`
	TargetID   string          `json:"target_id"`
	Details    json.RawMessage `json:"details"`
}

// AuditListResponse answers GET /admin/audit, newest first. NextCursor is
// null on the last page.
type AuditListResponse struct {
	Entries    []AuditEntry `json:"entries"`
	NextCursor *string      `json:"next_cursor"`
}

// Token lifetimes.
const (
	DefaultTokenTTL = 30 * 24 * time.Hour
	MaxTokenTTL     = 10 * 365 * 24 * time.Hour
)

// TokenAdmin creates, lists and revokes API keys in PostgreSQL. The admin
// routes use it, and so do the `submitter token` subcommands, which need no
// running server.
type TokenAdmin struct {
	store *store.Store
}

// OpenTokenAdmin connects to PostgreSQL (applying migrations).
func OpenTokenAdmin(ctx context.Context, databaseURL string) (*TokenAdmin, error) {
	st, err := store.Open(ctx, databaseURL, 2, true)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return &TokenAdmin{store: st}, nil
}

// Close closes the connection of an OpenTokenAdmin.
func (a *TokenAdmin) Close() { a.store.Close() }

// Create makes a new API key: name and scopes as in TokenRequest, ttl 0
// for a key that never expires. actor is recorded in the audit log. The
// answer holds the key; it is shown this once.
func (a *TokenAdmin) Create(ctx context.Context, actor, name string, scopes []string, ttl time.Duration) (TokenCreated, error) {
	if name == "" {
		return TokenCreated{}, httpx.InvalidField("name", "required")
	}
	if msg := checkText(name, maxNameLen); msg != "" {
		return TokenCreated{}, httpx.InvalidField("name", "%s", msg)
	}
	scopes, err := auth.NormalizeScopes(scopes)
	if err != nil {
		return TokenCreated{}, httpx.InvalidField("scopes", "%v", err)
	}
	if ttl < 0 || ttl > MaxTokenTTL {
		return TokenCreated{}, httpx.InvalidField("ttl", "must be between 0 (never expires) and %s", MaxTokenTTL)
	}
	key, hash := auth.NewAPIKey()
	k, err := a.store.APIKeyInsert(ctx, store.APIKeyInsertParams{Name: name, Hash: hash, Scopes: scopes, TTL: ttl, Actor: actor})
	if err != nil {
		return TokenCreated{}, err
	}
	return TokenCreated{Token: tokenView(k), Key: key}, nil
}

// List returns every API key, newest first, revoked ones included.
func (a *TokenAdmin) List(ctx context.Context) ([]Token, error) {
	keys, err := a.store.APIKeyList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Token, len(keys))
	for i, k := range keys {
		out[i] = tokenView(k)
	}
	return out, nil
}

// Revoke revokes API key id; servers refuse it within auth.KeyCacheTTL.
// Revoking a revoked key changes nothing. An unknown id is job.ErrNotFound.
func (a *TokenAdmin) Revoke(ctx context.Context, actor string, id int64) (Token, error) {
	k, err := a.store.APIKeyRevoke(ctx, id, actor)
	if err != nil {
		return Token{}, err
	}
	return tokenView(k), nil
}

func tokenView(k auth.APIKey) Token {
	t := Token{ID: formatID(k.ID), Name: k.Name, Scopes: k.Scopes, CreatedAt: k.CreatedAt.UTC(),
		ExpiresAt: optTime(k.ExpiresAt), RevokedAt: optTime(k.RevokedAt), LastUsedAt: optTime(k.LastUsedAt)}
	if t.Scopes == nil {
		t.Scopes = []string{}
	}
	return t
}

// ---- routes ----

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
		return s.storeError("token_create", err)
	}
	httpx.WriteJSON(w, http.StatusCreated, created)
	return nil
}

// listTokens handles GET /admin/tokens (admin).
func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) error {
	tokens, err := s.tokens.List(r.Context())
	if err != nil {
		return s.storeError("token_list", err)
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
		return s.storeError("token_revoke", err)
	}
	httpx.WriteJSON(w, http.StatusOK, t)
	return nil
}

// listAudit handles GET /admin/audit?limit=&cursor= (admin).
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	var before int64
	if c := r.URL.Query().Get("cursor"); c != "" {
		if before, err = parseID(c); err != nil {
			return httpx.InvalidField("cursor", "not a cursor from next_cursor")
		}
	}
	entries, next, err := s.store.AuditList(r.Context(), limit, before)
	if err != nil {
		return s.storeError("audit_list", err)
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

// ---- audit ----

// audit writes the audit row of an admin action before the action runs,
// so that no admin action happens unrecorded: if the row cannot be
// written, the action does not happen and the caller gets the error. done
// records the action's outcome in the row (best effort: a failure is
// logged, the row keeps saying the action was attempted).
func (s *Server) audit(r *http.Request, action, targetType, targetID string) (done func(outcome map[string]any), err error) {
	actor := httpx.PrincipalFrom(r.Context()).Actor()
	id, err := s.store.AuditInsert(r.Context(), store.AuditEntry{Actor: actor, Action: action, TargetType: targetType,
		TargetID: targetID, Details: json.RawMessage(`{"result":"attempted"}`)})
	if err != nil {
		return nil, s.storeError("audit", err)
	}
	return func(outcome map[string]any) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), bestEffortTimeout)
		defer cancel()
		if err := s.store.AuditSetOutcome(ctx, id, outcome); err != nil {
			s.metrics.storeErrors.WithLabelValues("audit").Inc()
			s.logger.Error("record audit outcome", "audit_id", id, "action", action, "error", err)
		}
	}, nil
}

// failure is the audit outcome of an action that failed: the error code
// the caller got.
func failure(err error) map[string]any {
	status, body := httpx.Classify(err)
	return map[string]any{"result": "failed", "status": status, "code": body.Code}
}
