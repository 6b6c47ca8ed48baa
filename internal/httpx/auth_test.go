package httpx_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/golang-jwt/jwt/v5"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
)

// tokens is an Authenticator with fixed tokens.
type tokens map[string]auth.Principal

const secretToken = "s3cret-token-value"

func (ts tokens) Verify(_ context.Context, h string) (auth.Principal, error) {
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return auth.Principal{}, &auth.Error{Reason: "missing bearer token"}
	}
	if tok == "db-down" {
		return auth.Principal{}, errors.New("connection refused")
	}
	p, ok := ts[tok]
	if !ok {
		return auth.Principal{}, &auth.Error{Reason: "invalid token"}
	}
	return p, nil
}

func authRouter(t *testing.T, a httpx.Authenticator, failures *httpx.RateLimiter) (http.Handler, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	r := httpx.NewRouter(slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
	r.Group(func(r chi.Router) {
		r.Use(httpx.Authenticate(a, failures))
		ok := func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteJSON(w, 200, map[string]string{"actor": httpx.PrincipalFrom(r.Context()).Actor()})
		}
		r.With(httpx.RequireScope(auth.ScopeRead)).Get("/read", ok)
		r.With(httpx.RequireScope(auth.ScopeAdmin)).Get("/admin", ok)
	})
	return r, logs
}

func serve(h http.Handler, method, path string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = "192.0.2.1:1234"
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func errorCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var e wire.ErrorResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("%d answer is not the JSON error shape: %q", rec.Code, rec.Body)
	}
	return e.Error.Code
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	ts := tokens{
		secretToken: {Kind: auth.KindAPIKey, ID: "1", Name: "reader", Scopes: []string{"read"}, RateKey: "key:1"},
		"admin":     {Kind: auth.KindAPIKey, ID: "2", Name: "root", Scopes: []string{"admin"}, RateKey: "key:2"},
	}
	h, logs := authRouter(t, ts, nil)
	tests := []struct {
		name, path string
		headers    []string
		status     int
		code       string
		challenge  string // substring of WWW-Authenticate
	}{
		{"no token", "/read", nil, 401, wire.CodeUnauthorized, `Bearer realm="dts"`},
		{"bad token", "/read", []string{"Authorization", "Bearer nope"}, 401, wire.CodeUnauthorized, `error="invalid_token"`},
		{"two headers", "/read", []string{"Authorization", "Bearer " + secretToken, "Authorization", "Bearer admin"}, 401, wire.CodeUnauthorized, "invalid_token"},
		{"store down", "/read", []string{"Authorization", "Bearer db-down"}, 500, wire.CodeInternal, ""},
		{"right scope", "/read", []string{"Authorization", "Bearer " + secretToken}, 200, "", ""},
		{"wrong scope", "/admin", []string{"Authorization", "Bearer " + secretToken}, 403, wire.CodeForbidden, `error="insufficient_scope", scope="admin"`},
		{"admin implies read", "/read", []string{"Authorization", "Bearer admin"}, 200, "", ""},
	}
	for _, tt := range tests {
		rec := serve(h, "GET", tt.path, tt.headers...)
		if rec.Code != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.name, rec.Code, tt.status, rec.Body)
			continue
		}
		if tt.code != "" && errorCode(t, rec) != tt.code {
			t.Errorf("%s: code %q, want %q", tt.name, errorCode(t, rec), tt.code)
		}
		if got := rec.Header().Get("WWW-Authenticate"); !strings.Contains(got, tt.challenge) || (tt.challenge == "" && got != "") {
			t.Errorf("%s: WWW-Authenticate %q, want %q", tt.name, got, tt.challenge)
		}
	}
	out := logs.String()
	if strings.Contains(out, secretToken) {
		t.Errorf("the token is in the log:\n%s", out)
	}
	if !strings.Contains(out, `"actor":"api_key:1:reader"`) {
		t.Errorf("log lacks the actor:\n%s", out)
	}

	// Auth off: anonymous with every scope.
	open, _ := authRouter(t, nil, nil)
	if rec := serve(open, "GET", "/admin"); rec.Code != 200 || !strings.Contains(rec.Body.String(), "anonymous") {
		t.Errorf("auth off: %d %s", rec.Code, rec.Body)
	}
}

// TestAuthenticateFailureLimit: the failure budget is per client IP, but
// only failures are limited. Behind a proxy or NAT many clients share an
// address; one of them guessing must not lock the others out.
func TestAuthenticateFailureLimit(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	failures := httpx.NewRateLimiter(1, 3, clock)
	h, _ := authRouter(t, tokens{secretToken: {Kind: auth.KindAPIKey, ID: "1", Scopes: []string{"read"}, RateKey: "key:1"}}, failures)
	for i := range 3 {
		if rec := serve(h, "GET", "/read", "Authorization", "Bearer guess"+strconv.Itoa(i)); rec.Code != 401 {
			t.Fatalf("guess %d: %d", i, rec.Code)
		}
	}
	// The budget is spent: more bad tokens get 429.
	for _, hdr := range []string{"Bearer guess3", "Bearer guess0", ""} {
		rec := serve(h, "GET", "/read", "Authorization", hdr)
		if rec.Code != 429 || errorCode(t, rec) != wire.CodeRateLimited || rec.Header().Get("Retry-After") != "1" {
			t.Fatalf("after 3 failures, %q: %d %q Retry-After %q", hdr, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
		}
	}
	// A good token from the same address is served at once, again and
	// again, and is never charged.
	for i := range 10 {
		if rec := serve(h, "GET", "/read", "Authorization", "Bearer "+secretToken); rec.Code != 200 {
			t.Fatalf("good token %d from an address out of failures: %d %s", i, rec.Code, rec.Body)
		}
	}
	// Another address has its own budget.
	req := httptest.NewRequest("GET", "/read", nil)
	req.RemoteAddr = "198.51.100.7:9"
	req.Header.Set("Authorization", "Bearer guess")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 401 {
		t.Fatalf("a guess from another address: %d", rec.Code)
	}
	// The budget refills at 1 a second.
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if rec := serve(h, "GET", "/read", "Authorization", "Bearer guess4"); rec.Code != 401 {
		t.Fatalf("a second later, a bad token: %d, want 401", rec.Code)
	}
	if rec := serve(h, "GET", "/read", "Authorization", "Bearer guess5"); rec.Code != 429 {
		t.Fatalf("and the next: %d, want 429", rec.Code)
	}
}

// TestAuthenticateJWTAudience: a JWT for another audience gets 401 once
// an audience is configured.
func TestAuthenticateJWTAudience(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef")
	v, err := auth.NewVerifier(auth.Config{JWTSecret: secret, JWTAudience: "dts-api"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := authRouter(t, v, nil)
	for _, tt := range []struct {
		aud    any
		status int
	}{{"other", 401}, {[]string{"other"}, 401}, {"dts-api", 200}, {[]string{"x", "dts-api"}, 200}} {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": "alice", "aud": tt.aud, "scope": "read", "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		rec := serve(h, "GET", "/read", "Authorization", "Bearer "+tok)
		if rec.Code != tt.status {
			t.Errorf("aud %v: %d %s, want %d", tt.aud, rec.Code, rec.Body, tt.status)
		}
		if tt.status == 401 && (errorCode(t, rec) != wire.CodeUnauthorized || !strings.Contains(rec.Body.String(), "audience")) {
			t.Errorf("aud %v: %s, want unauthorized naming the audience", tt.aud, rec.Body)
		}
	}
}

// lookupKeys is an Authenticator like *auth.Verifier: some answers come
// from a cache (VerifyCached, no I/O), the others need a lookup (Verify),
// which, when entered is set, signals it and waits for release.
type lookupKeys struct {
	cached   tokens // VerifyCached's good tokens
	refused  string // a token VerifyCached knows is bad
	verified tokens // Verify's good tokens

	entered chan struct{}
	release chan struct{}
	lookups atomic.Int64
}

func (k *lookupKeys) VerifyCached(h string) (auth.Principal, error) {
	if p, err := k.cached.Verify(context.Background(), h); err == nil {
		return p, nil
	}
	if h == "Bearer "+k.refused {
		return auth.Principal{}, &auth.Error{Reason: "invalid api key"}
	}
	return auth.Principal{}, auth.ErrNeedsLookup
}

func (k *lookupKeys) Verify(ctx context.Context, h string) (auth.Principal, error) {
	if p, err := k.VerifyCached(h); !errors.Is(err, auth.ErrNeedsLookup) {
		return p, err
	}
	k.lookups.Add(1)
	if k.entered != nil {
		select {
		case k.entered <- struct{}{}:
			<-k.release
		case <-ctx.Done():
			return auth.Principal{}, ctx.Err()
		}
	}
	return k.verified.Verify(ctx, h)
}

// TestAuthenticateFailureLimitCost: once an address has spent its failure
// budget, its requests are still authenticated, but what that costs stays
// small: answers that need no lookup are given at once, and lookups run one
// at a time per address, so a guesser keeps at most one query busy.
func TestAuthenticateFailureLimitCost(t *testing.T) {
	t.Parallel()
	ks := &lookupKeys{
		cached:   tokens{"cached": {Kind: auth.KindAPIKey, ID: "1", Scopes: []string{"read"}, RateKey: "key:1"}},
		refused:  "known-bad",
		verified: tokens{"fresh": {Kind: auth.KindAPIKey, ID: "2", Scopes: []string{"read"}, RateKey: "key:2"}},
	}
	failures := httpx.NewRateLimiter(1e-6, 2, nil) // no refill within the test
	h, _ := authRouter(t, ks, failures)
	for i := range 2 {
		if rec := serve(h, "GET", "/read", "Authorization", "Bearer guess"+strconv.Itoa(i)); rec.Code != 401 {
			t.Fatalf("guess %d: %d", i, rec.Code)
		}
	}
	before := ks.lookups.Load()
	if rec := serve(h, "GET", "/read", "Authorization", "Bearer cached"); rec.Code != 200 {
		t.Fatalf("cached good token, address out of failures: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(h, "GET", "/read", "Authorization", "Bearer known-bad"); rec.Code != 429 {
		t.Fatalf("cached bad token, address out of failures: %d %s", rec.Code, rec.Body)
	}
	if n := ks.lookups.Load() - before; n != 0 {
		t.Fatalf("%d lookups for answers the cache had", n)
	}

	// Tokens needing a lookup: good ones served, bad ones refused.
	if rec := serve(h, "GET", "/read", "Authorization", "Bearer fresh"); rec.Code != 200 {
		t.Fatalf("good token needing a lookup, address out of failures: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(h, "GET", "/read", "Authorization", "Bearer guess2"); rec.Code != 429 {
		t.Fatalf("bad token needing a lookup, address out of failures: %d %s", rec.Code, rec.Body)
	}

	// One lookup at a time per address: while one is under way, another
	// request from the address waits (here its client gives up) instead of
	// starting a second; the first is then served.
	ks.entered, ks.release = make(chan struct{}), make(chan struct{})
	first := make(chan int, 1)
	go func() { first <- serve(h, "GET", "/read", "Authorization", "Bearer fresh").Code }()
	<-ks.entered
	before = ks.lookups.Load()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, "GET", "/read", nil)
	req.RemoteAddr = "192.0.2.1:1234"
	req.Header.Set("Authorization", "Bearer guess3")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if n := ks.lookups.Load() - before; n != 0 {
		t.Errorf("a second lookup started for the address while one was under way")
	}
	close(ks.release)
	if c := <-first; c != 200 {
		t.Errorf("the lookup under way: %d", c)
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	lim := httpx.NewRateLimiter(0.5, 2, clock) // a token every 2 s
	ts := tokens{
		"a": {Kind: auth.KindAPIKey, ID: "1", Scopes: []string{"read"}, RateKey: "key:1"},
		"b": {Kind: auth.KindAPIKey, ID: "2", Scopes: []string{"read"}, RateKey: "key:2"},
	}
	r := httpx.NewRouter(slog.New(slog.DiscardHandler), nil)
	r.With(httpx.Authenticate(ts, nil), httpx.RateLimit(lim)).Get("/x", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) })
	for i := range 2 {
		if rec := serve(r, "GET", "/x", "Authorization", "Bearer a"); rec.Code != 204 {
			t.Fatalf("request %d within the burst: %d", i, rec.Code)
		}
	}
	rec := serve(r, "GET", "/x", "Authorization", "Bearer a")
	if rec.Code != 429 || errorCode(t, rec) != wire.CodeRateLimited || rec.Header().Get("Retry-After") != "2" {
		t.Fatalf("over the burst: %d %s Retry-After %q", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	// Buckets are per token.
	if rec := serve(r, "GET", "/x", "Authorization", "Bearer b"); rec.Code != 204 {
		t.Fatalf("another token: %d", rec.Code)
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	if rec := serve(r, "GET", "/x", "Authorization", "Bearer a"); rec.Code != 204 {
		t.Fatalf("after the refill: %d", rec.Code)
	}

	// Auth off: per client IP.
	lim2 := httpx.NewRateLimiter(0.5, 1, clock)
	r2 := httpx.NewRouter(slog.New(slog.DiscardHandler), nil)
	r2.With(httpx.Authenticate(nil, nil), httpx.RateLimit(lim2)).Get("/x", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) })
	if rec := serve(r2, "GET", "/x"); rec.Code != 204 {
		t.Fatal(rec.Code)
	}
	if rec := serve(r2, "GET", "/x"); rec.Code != 429 {
		t.Fatalf("same IP, over the burst: %d", rec.Code)
	}
	req := httptest.NewRequest("GET", "/x", nil)
	req.RemoteAddr = "198.51.100.7:9"
	rec = httptest.NewRecorder()
	r2.ServeHTTP(rec, req)
	if rec.Code != 204 {
		t.Fatalf("another IP: %d", rec.Code)
	}
}

func TestLimitConcurrency(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	r := httpx.NewRouter(slog.New(slog.DiscardHandler), nil)
	r.With(httpx.LimitConcurrency(2)).Get("/slow", func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
		w.WriteHeader(204)
	})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if rec := serve(r, "GET", "/slow"); rec.Code != 204 {
				t.Errorf("within the cap: %d", rec.Code)
			}
		})
	}
	<-entered
	<-entered
	rec := serve(r, "GET", "/slow")
	if rec.Code != 503 || errorCode(t, rec) != wire.CodeOverloaded || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("over the cap: %d %s", rec.Code, rec.Body)
	}
	close(release)
	wg.Wait()
	go func() { <-entered }()
	if rec := serve(r, "GET", "/slow"); rec.Code != 204 {
		t.Errorf("after the others finished: %d", rec.Code)
	}
}

func TestRateLimiterBounded(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	lim := httpx.NewRateLimiter(10, 1, clock)
	for i := range 1000 {
		lim.Allow("ip:" + strconv.Itoa(i))
	}
	if ok, _ := lim.Allow("ip:1"); ok {
		t.Fatal("bucket ip:1 refilled without time passing")
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	// The sweep drops idle buckets; a dropped one starts full again, which
	// is what it would hold by now anyway.
	if ok, _ := lim.Allow("ip:1"); !ok {
		t.Fatal("ip:1 still empty two minutes later")
	}
}
