// Package auth decides who a request comes from and what it may do: it
// verifies bearer tokens (JWTs and API keys), names the scopes a caller
// holds, makes the secrets handed to people (API keys, worker credentials)
// and checks that a server without auth listens on loopback only. The
// submitter's API and the coordinator's /workers share it, so one token
// means the same thing everywhere.
//
// Why it is shaped this way: JWT validation is delegated to
// github.com/golang-jwt/jwt/v5 with the allowed algorithms pinned
// (jwt.WithValidMethods) and the key chosen by algorithm, never by what the
// token claims to be; hand-written JWT checks are where "alg: none" and
// HS256-with-an-RSA-public-key confusion bugs live. API keys are random
// 256-bit secrets stored only as SHA-256 hashes: a database leak does not
// leak usable keys, and a fast hash is enough for a secret with that much
// entropy (no password stretching needed).
//
// What must stay true:
//   - No error, log line or metric carries a token, a key or a credential;
//     errors name what was wrong with one, never what it was.
//   - Verify never panics and costs no database query for a malformed
//     token; a key lookup is cached for at most KeyCacheTTL, so a revoked
//     key stops working within seconds.
//   - admin implies read and submit; nothing else implies anything.
//
// It imports the standard library and golang-jwt only: the store
// implements KeyLookup, not the other way round.
package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Scopes.
const (
	ScopeSubmit = "submit" // create jobs
	ScopeRead   = "read"   // read jobs, stats, the DLQ
	ScopeAdmin  = "admin"  // cancel, requeue, tokens, audit, workers; implies read and submit
)

// AllScopes lists every scope, in the order they are shown.
var AllScopes = []string{ScopeSubmit, ScopeRead, ScopeAdmin}

// ValidScope reports whether s names a scope.
func ValidScope(s string) bool { return slices.Contains(AllScopes, s) }

// ParseScopes parses a list of scopes separated by commas or spaces
// ("submit,read", "submit read"); each must be valid, and the list non-empty.
// The result is sorted and without repeats.
func ParseScopes(s string) ([]string, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	if len(fields) == 0 {
		return nil, errors.New("no scope given: want one or more of submit, read, admin")
	}
	return NormalizeScopes(fields)
}

// NormalizeScopes checks scopes and returns them sorted and without repeats.
func NormalizeScopes(scopes []string) ([]string, error) {
	if len(scopes) == 0 {
		return nil, errors.New("no scope given: want one or more of submit, read, admin")
	}
	out := make([]string, 0, len(scopes))
	for _, s := range scopes {
		if !ValidScope(s) {
			if len(s) > 20 {
				s = s[:20] + "..."
			}
			return nil, fmt.Errorf("unknown scope %q: want submit, read or admin", s)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Principal is who a request comes from.
type Principal struct {
	// Kind is "jwt", "api_key" or "anonymous" (auth off).
	Kind string
	// ID identifies the token: the API key's id, or the JWT's subject.
	ID string
	// Name is the API key's name or the JWT's subject.
	Name string
	// Scopes are the scopes the token grants (sorted; unknown ones dropped).
	Scopes []string
	// RateKey is the key of the caller's rate-limit bucket: one per token.
	// It is derived from the token without revealing it.
	RateKey string
}

// Principal kinds.
const (
	KindJWT       = "jwt"
	KindAPIKey    = "api_key"
	KindAnonymous = "anonymous"
)

// Anonymous is the principal of every request when auth is off: it holds
// every scope.
var Anonymous = Principal{Kind: KindAnonymous, ID: "anonymous", Name: "anonymous", Scopes: AllScopes}

// Has reports whether p holds scope; admin holds every scope.
func (p Principal) Has(scope string) bool {
	return slices.Contains(p.Scopes, scope) || slices.Contains(p.Scopes, ScopeAdmin)
}

// Actor names p in the audit log and in request logs: "anonymous",
// "api_key:12:ci-deploy" or "jwt:alice". It never contains a secret.
func (p Principal) Actor() string {
	switch p.Kind {
	case KindAPIKey:
		return KindAPIKey + ":" + p.ID + ":" + p.Name
	case KindJWT:
		return KindJWT + ":" + p.Name
	case "":
		return KindAnonymous
	}
	return p.Kind
}

// APIKey is an API key as stored: never the key itself, only facts about it.
type APIKey struct {
	ID         int64
	Name       string
	Scopes     []string
	CreatedAt  time.Time
	ExpiresAt  *time.Time // nil: never expires
	RevokedAt  *time.Time // nil: not revoked
	LastUsedAt *time.Time // nil: never used
}

// KeyLookup finds an API key by the SHA-256 hash of the key (HashSecret).
// It returns an error wrapping ErrKeyNotFound when no key has that hash;
// any other error is a failure of the lookup itself. The store implements it.
type KeyLookup interface {
	APIKeyByHash(ctx context.Context, hash string) (APIKey, error)
}

// ErrKeyNotFound is what a KeyLookup returns for an unknown hash.
var ErrKeyNotFound = errors.New("api key not found")
