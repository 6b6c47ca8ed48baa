package submitter

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
	store *store.Store
}

// OpenTokenAdmin connects to PostgreSQL (applying migrations).
func OpenTokenAdmin(ctx context.Context, databaseURL string) (*TokenAdmin, error) {
	st, err := store.Open(ctx, databaseURL, store.Options{MaxConns: 2, Migrate: true})
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
