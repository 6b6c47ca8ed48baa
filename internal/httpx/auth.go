package httpx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/wire"
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

// CachedAuthenticator is an Authenticator that can also answer without
// I/O when it can; *auth.Verifier is one. VerifyCached returns Verify's
// answer, or auth.ErrNeedsLookup when only Verify can tell.
type CachedAuthenticator interface {
	Authenticator
	VerifyCached(authorization string) (auth.Principal, error)
}

// Authenticate makes every request name its caller with an
// "Authorization: Bearer <token>" header, checked by a. Without a token,
// or with a bad one, it answers 401 unauthorized with a WWW-Authenticate
// challenge. A nil a means auth is off: every request is anonymous and
// holds every scope.
//
// failures, if not nil, limits failed attempts per client IP. Only
// failures are limited: a good token is always served, even from an
// address that has used up its burst of failures (behind a proxy or a NAT
// many clients share one). What the limit protects is the cost of
// checking tokens, so from such an address a token is first checked
// without I/O if a is a CachedAuthenticator (JWTs, cached API keys), and
// the tokens that need a lookup are checked one at a time per address;
// those that fail get 429 instead of 401. A guesser thus keeps at most one
// key lookup busy. Clients whose tokens are good are never charged. The
// rule is CheckToken's, which the console's login and cookie follow too.
//
// The header is read here and nowhere else; it is never logged.
func Authenticate(a Authenticator, failures *RateLimiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if a == nil {
				next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), auth.Anonymous)))
				return
			}
			header := r.Header.Get("Authorization")
			var refuse *auth.Error
			if len(r.Header.Values("Authorization")) > 1 {
				refuse = &auth.Error{Reason: "more than one Authorization header"}
			}
			p, retry, err := checkToken(r, a, failures, header, refuse)
			var ae *auth.Error
			switch {
			case errors.As(err, &ae) && retry > 0:
				rateLimited(w, r, retry, "too many failed authentication attempts from this address")
				return
			case errors.As(err, &ae):
				challenge := `Bearer realm="` + Realm + `"`
				if header != "" {
					challenge += `, error="invalid_token"`
				}
				w.Header().Set("WWW-Authenticate", challenge)
				WriteError(w, r, Errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "%s", ae.Reason))
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

// CheckToken checks header (an Authorization value: "Bearer <token>"),
// sent by r's client, by a, under failures' budget of failed attempts per
// client IP (nil: no limit), by Authenticate's rule: only failures are
// limited. Every front end that takes tokens (the API, the console's login
// and its cookie) checks them here with the same failures, so they share
// one budget per address and none is a way around it.
//
// A bad token is an *auth.Error, charged to the address. If the address
// had already used up its budget, retry is how long until it has a failure
// left: the caller answers 429 with Retry-After instead of 401. A good
// token is returned with retry 0 whatever the budget. Any other error is
// the server's (its key store is down) or the client's going away.
func CheckToken(r *http.Request, a Authenticator, failures *RateLimiter, header string) (p auth.Principal, retry time.Duration, err error) {
	return checkToken(r, a, failures, header, nil)
}

// checkToken is CheckToken; a non-nil refuse is the answer, without a
// check, but charged as any failure.
func checkToken(r *http.Request, a Authenticator, failures *RateLimiter, header string, refuse *auth.Error) (auth.Principal, time.Duration, error) {
	failKey := "fail:" + ClientIP(r)
	var wait time.Duration
	var blocked bool
	if failures != nil {
		wait, blocked = failures.Blocked(failKey)
	}
	var p auth.Principal
	var err error
	switch {
	case refuse != nil:
		err = refuse
	case blocked:
		p, err = verifyCheaply(r.Context(), a, failures.lookups, failKey, header)
	default:
		p, err = a.Verify(r.Context(), header)
	}
	var ae *auth.Error
	if !errors.As(err, &ae) {
		return p, 0, err
	}
	if failures != nil {
		failures.Allow(failKey)
	}
	if !blocked {
		return auth.Principal{}, 0, err
	}
	return auth.Principal{}, max(wait, time.Nanosecond), err
}

// verifyCheaply checks a token from an address out of failures: without
// I/O if a can, else with a's full check, one at a time per address.
func verifyCheaply(ctx context.Context, a Authenticator, lookups *gate, key, header string) (auth.Principal, error) {
	if c, ok := a.(CachedAuthenticator); ok {
		p, err := c.VerifyCached(header)
		if !errors.Is(err, auth.ErrNeedsLookup) {
			return p, err
		}
	}
	release, err := lookups.enter(ctx, key)
	if err != nil {
		return auth.Principal{}, err // the client went away, or timed out
	}
	defer release()
	return a.Verify(ctx, header)
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
				WriteError(w, r, Errorf(http.StatusForbidden, wire.CodeForbidden, "this route needs the %s scope; the token has: %s", scope, has))
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
