package app

import (
	"context"
	"fmt"
	"time"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// Token and TokenCreated are an API key as the API shows it (never the
// key, never its hash) and, once, with the key.
type (
	Token        = wire.Token
	TokenCreated = wire.TokenCreated
)

// Token lifetimes.
const (
	DefaultTokenTTL = 30 * 24 * time.Hour
	MaxTokenTTL     = 10 * 365 * 24 * time.Hour
)

// TokenAdmin creates, lists and revokes API keys in PostgreSQL. The admin
// routes use it, and so do the `submitter token` subcommands, which need no
// running server.
type TokenAdmin struct {
	store tokenStore
	close func() // of OpenTokenAdmin's connection; nil otherwise
}

// OpenTokenAdmin connects to PostgreSQL (applying migrations).
func OpenTokenAdmin(ctx context.Context, databaseURL string) (*TokenAdmin, error) {
	st, err := store.Open(ctx, databaseURL, store.Options{MaxConns: 2, Migrate: true})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return &TokenAdmin{store: st, close: st.Close}, nil
}

// Close closes the connection of an OpenTokenAdmin.
func (a *TokenAdmin) Close() {
	if a.close != nil {
		a.close()
	}
}

// Create makes a new API key: name and scopes as in wire.TokenRequest, ttl 0
// for a key that never expires. actor is recorded in the audit log. The
// answer holds the key; it is shown this once.
func (a *TokenAdmin) Create(ctx context.Context, actor, name string, scopes []string, ttl time.Duration) (TokenCreated, error) {
	if name == "" {
		return TokenCreated{}, httpx.InvalidField("name", "required")
	}
	if msg := CheckText(name, maxNameLen); msg != "" {
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

// TokenCreate makes a new API key (TokenAdmin.Create), recording the
// principal in ctx as its creator.
func (a *App) TokenCreate(ctx context.Context, name string, scopes []string, ttl time.Duration) (TokenCreated, error) {
	created, err := a.tokens.Create(ctx, httpx.PrincipalFrom(ctx).Actor(), name, scopes, ttl)
	if err != nil {
		return TokenCreated{}, a.storeError(storeOpTokenCreate, err)
	}
	return created, nil
}

// TokenList returns every API key, newest first, revoked ones included.
func (a *App) TokenList(ctx context.Context) ([]Token, error) {
	tokens, err := a.tokens.List(ctx)
	if err != nil {
		return nil, a.storeError(storeOpTokenList, err)
	}
	return tokens, nil
}

// TokenRevoke revokes an API key (TokenAdmin.Revoke), recording the
// principal in ctx as who revoked it.
func (a *App) TokenRevoke(ctx context.Context, id int64) (Token, error) {
	t, err := a.tokens.Revoke(ctx, httpx.PrincipalFrom(ctx).Actor(), id)
	if err != nil {
		return Token{}, a.storeError(storeOpTokenRevoke, err)
	}
	return t, nil
}

// AuditList returns a page of the audit log, newest first, before the id
// before (0: from the newest).
func (a *App) AuditList(ctx context.Context, limit int, before int64) (wire.AuditListResponse, error) {
	entries, next, err := a.store.AuditList(ctx, limit, before)
	if err != nil {
		return wire.AuditListResponse{}, a.storeError(storeOpAuditList, err)
	}
	resp := wire.AuditListResponse{Entries: make([]wire.AuditEntry, len(entries))}
	for i, e := range entries {
		resp.Entries[i] = wire.AuditEntry{ID: formatID(e.ID), At: e.At.UTC(), Actor: e.Actor, Action: e.Action,
			TargetType: e.TargetType, TargetID: e.TargetID, Details: e.Details}
	}
	if next > 0 {
		c := formatID(next)
		resp.NextCursor = &c
	}
	return resp, nil
}
