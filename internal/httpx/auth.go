package httpx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/dtsched/dts/internal/auth"
)

// Error codes of authentication and overload answers. Like wire.Code*,
// they are part of the API: never rename one.
const (
	CodeUnauthorized = "unauthorized" // 401: missing, malformed, badly signed, expired, revoked or unknown token
	CodeForbidden    = "forbidden"    // 403: the token lacks the route's scope
	CodeRateLimited  = "rate_limited" // 429: over the caller's rate; see Retry-After
	CodeOverloaded   = "overloaded"   // 503: too many requests in progress; retry shortly
)

// Realm is the realm of WWW-Authenticate challenges.
const Realm = "dts"

// Authenticator checks the value of an Authorization header;
// *auth.Verifier is one. An *auth.Error means 401; any other error is the
// server's (its key store is down).
type Authenticator interface {
	Verify(ctx context.Context, authorization string) (auth.Principal, error)
}

type principalKey struct{}

// PrincipalFrom returns the principal Authenticate stored in ctx, or the
// anonymous one (every scope) when there is none: routes outside
// Authenticate are open.
func PrincipalFrom(ctx context.Context) auth.Principal {
	if p, ok := ctx.Value(principalKey{}).(auth.Principal); ok {
		return p
	}
	return auth.Anonymous
}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p auth.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// Authenticate makes every request name its caller with an
// "Authorization: Bearer <token>" header, checked by a. Without a token,
// or with a bad one, it answers 401 unauthorized with a WWW-Authenticate
// challenge. A nil a means auth is off: every request is anonymous and
// holds every scope.
//
// failures, if not nil, limits failed attempts per client IP: once a
// client has used up its burst of failures it gets 429 without its token
// being checked, so guessing keys costs the database nothing. Clients whose
// tokens are good are never charged.
//
// The header is read here and nowhere else; it is never logged.
func Authenticate(a Authenticator, failures *RateLimiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if a == nil {
				next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), auth.Anonymous)))
				return
			}
			ip := ClientIP(r)
			if failures != nil {
				if wait, blocked := failures.Blocked("fail:" + ip); blocked {
					rateLimited(w, r, wait, "too many failed authentication attempts from this address")
					return
				}
			}
			var p auth.Principal
			var err error
			if vals := r.Header.Values("Authorization"); len(vals) > 1 {
				err = &auth.Error{Reason: "more than one Authorization header"}
			} else {
				p, err = a.Verify(r.Context(), r.Header.Get("Authorization"))
			}
			var ae *auth.Error
			switch {
			case errors.As(err, &ae):
				if failures != nil {
					failures.Allow("fail:" + ip)
				}
				challenge := `Bearer realm="` + Realm + `"`
				if r.Header.Get("Authorization") != "" {
					challenge += `, error="invalid_token"`
				}
				w.Header().Set("WWW-Authenticate", challenge)
				WriteError(w, r, Errorf(http.StatusUnauthorized, CodeUnauthorized, "%s", ae.Reason))
				return
			case err != nil:
				WriteError(w, r, err) // the key store failed: 5xx, logged
				return
			}
			if st := stateFrom(r.Context()); st != nil {
				st.actor = p.Actor()
			}
			next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
		})
	}
}

// RequireScope answers 403 forbidden unless the request's principal holds
// scope (admin holds every scope). Put it inside Authenticate.
func RequireScope(scope string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := PrincipalFrom(r.Context())
			if !p.Has(scope) {
				has := strings.Join(p.Scopes, ", ")
				if has == "" {
					has = "none"
				}
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm=%q, error="insufficient_scope", scope=%q`, Realm, scope))
				WriteError(w, r, Errorf(http.StatusForbidden, CodeForbidden, "this route needs the %s scope; the token has: %s", scope, has))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// ClientIP is the address the request came from (the TCP peer: headers
// such as X-Forwarded-For are not trusted, since any client can set them).
func ClientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
