package auth_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/dtsched/dts/internal/auth"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

// keys is an in-memory KeyLookup that counts its lookups.
type keys struct {
	mu      sync.Mutex
	byHash  map[string]auth.APIKey
	lookups atomic.Int64
	fail    error
}

func newKeys() *keys { return &keys{byHash: map[string]auth.APIKey{}} }

func (k *keys) APIKeyByHash(_ context.Context, hash string) (auth.APIKey, error) {
	k.lookups.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return auth.APIKey{}, k.fail
	}
	key, ok := k.byHash[hash]
	if !ok {
		return auth.APIKey{}, auth.ErrKeyNotFound
	}
	return key, nil
}

func (k *keys) add(rec auth.APIKey) string {
	key, hash := auth.NewAPIKey()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.byHash[hash] = rec
	return key
}

func (k *keys) revoke(key string, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	rec := k.byHash[auth.HashSecret(key)]
	rec.RevokedAt = &at
	k.byHash[auth.HashSecret(key)] = rec
}

func sign(t testing.TB, method jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pemOf(t testing.TB, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestVerifyJWT(t *testing.T) {
	t.Parallel()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims := func(scope string, mods ...func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "alice", "iss": "dts-test", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "scope": scope}
		for _, m := range mods {
			m(c)
		}
		return c
	}
	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, secret, c) }
	noneToken := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims("admin"))
	// Alg confusion: HS256 signed with the RSA public key's PEM as the secret.
	confused := sign(t, jwt.SigningMethodHS256, pemOf(t, &rsaKey.PublicKey), claims("admin"))

	hsOnly := auth.Config{JWTSecret: secret, JWTIssuer: "dts-test"}
	rsaCfg := auth.Config{JWTPublicKeyPEM: pemOf(t, &rsaKey.PublicKey), JWTIssuer: "dts-test"}
	edCfg := auth.Config{JWTPublicKeyPEM: pemOf(t, edPub)}

	tests := []struct {
		name   string
		cfg    auth.Config
		header string
		scopes []string // want; nil with reason
		reason string   // substring of the *auth.Error, "" for success
	}{
		{"hs256 ok", hsOnly, "Bearer " + hs(claims("submit read")), []string{"read", "submit"}, ""},
		{"scheme case-insensitive", hsOnly, "bearer " + hs(claims("read")), []string{"read"}, ""},
		{"unknown scopes dropped", hsOnly, "Bearer " + hs(claims("read write:all")), []string{"read"}, ""},
		{"no scope", hsOnly, "Bearer " + hs(claims("")), nil, ""},
		{"missing", hsOnly, "", nil, "missing"},
		{"basic scheme", hsOnly, "Basic YWxpY2U6cHc=", nil, "malformed Authorization"},
		{"no token", hsOnly, "Bearer ", nil, "malformed"},
		{"bad chars", hsOnly, "Bearer a b", nil, "malformed"},
		{"garbage", hsOnly, "Bearer abc", nil, "malformed token"},
		{"bad signature", hsOnly, "Bearer " + sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), claims("admin")), nil, "bad signature"},
		{"expired", hsOnly, "Bearer " + hs(claims("admin", func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() })), nil, "expired"},
		{"no exp", hsOnly, "Bearer " + hs(claims("admin", func(c jwt.MapClaims) { delete(c, "exp") })), nil, "required claim"},
		{"wrong issuer", hsOnly, "Bearer " + hs(claims("admin", func(c jwt.MapClaims) { c["iss"] = "evil" })), nil, "wrong issuer"},
		{"no issuer", hsOnly, "Bearer " + hs(claims("admin", func(c jwt.MapClaims) { delete(c, "iss") })), nil, "required claim"},
		{"issued in the future", hsOnly, "Bearer " + hs(claims("admin", func(c jwt.MapClaims) { c["iat"] = now.Add(time.Hour).Unix() })), nil, "not valid yet"},
		{"alg none", hsOnly, "Bearer " + noneToken, nil, "signature or signing algorithm"},
		{"rs256 refused by hs256 server", hsOnly, "Bearer " + sign(t, jwt.SigningMethodRS256, rsaKey, claims("admin")), nil, "signature or signing algorithm"},
		{"rs256 ok", rsaCfg, "Bearer " + sign(t, jwt.SigningMethodRS256, rsaKey, claims("admin")), []string{"admin"}, ""},
		{"rs512 refused", rsaCfg, "Bearer " + sign(t, jwt.SigningMethodRS512, rsaKey, claims("admin")), nil, "signature or signing algorithm"},
		{"alg confusion hs256 with public key", rsaCfg, "Bearer " + confused, nil, "signature or signing algorithm"},
		{"alg none on rsa server", rsaCfg, "Bearer " + noneToken, nil, "signature or signing algorithm"},
		{"eddsa ok", edCfg, "Bearer " + sign(t, jwt.SigningMethodEdDSA, edPriv, claims("submit")), []string{"submit"}, ""},
		{"eddsa wrong key", edCfg, "Bearer " + func() string {
			_, other, _ := ed25519.GenerateKey(rand.Reader)
			return sign(t, jwt.SigningMethodEdDSA, other, claims("submit"))
		}(), nil, "bad signature"},
		{"jwt on api-key-only server", auth.Config{APIKeys: true}, "Bearer " + hs(claims("admin")), nil, "API keys only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := auth.NewVerifier(tt.cfg, newKeys(), nil)
			if err != nil {
				t.Fatal(err)
			}
			p, err := v.Verify(t.Context(), tt.header)
			if tt.reason != "" {
				var ae *auth.Error
				if !errors.As(err, &ae) || !strings.Contains(ae.Reason, tt.reason) {
					t.Fatalf("Verify = %+v, %v; want *auth.Error containing %q", p, err, tt.reason)
				}
				if strings.Contains(err.Error(), strings.TrimPrefix(tt.header, "Bearer ")) && len(tt.header) > 12 {
					t.Errorf("error %q quotes the token", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if p.Kind != auth.KindJWT || p.Name != "alice" || strings.Join(p.Scopes, " ") != strings.Join(tt.scopes, " ") {
				t.Errorf("principal = %+v, want alice with %v", p, tt.scopes)
			}
			if p.RateKey == "" || strings.Contains(tt.header, strings.TrimPrefix(p.RateKey, "jwt:")) {
				t.Errorf("rate key %q is empty or part of the token", p.RateKey)
			}
		})
	}
}

// TestVerifyJWTAudience: with an audience configured, a JWT made for
// another audience (or for none) is refused; aud may be a string or an
// array. Without one, aud is not checked.
func TestVerifyJWTAudience(t *testing.T) {
	t.Parallel()
	now := time.Now()
	token := func(aud any) string {
		c := jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix(), "scope": "read"}
		if aud != nil {
			c["aud"] = aud
		}
		return "Bearer " + sign(t, jwt.SigningMethodHS256, secret, c)
	}
	withAud, err := auth.NewVerifier(auth.Config{JWTSecret: secret, JWTAudience: "dts-api"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	noAud, err := auth.NewVerifier(auth.Config{JWTSecret: secret}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		v      *auth.Verifier
		aud    any
		reason string // "" for success
	}{
		{"right audience", withAud, "dts-api", ""},
		{"right audience in an array", withAud, []string{"other", "dts-api"}, ""},
		{"other audience", withAud, "other", "wrong audience"},
		{"other audiences in an array", withAud, []string{"other", "dts"}, "wrong audience"},
		{"no audience", withAud, nil, "required claim"},
		{"empty audience", withAud, "", "required claim"},
		{"not checked: other", noAud, "other", ""},
		{"not checked: none", noAud, nil, ""},
	}
	for _, tt := range tests {
		p, err := tt.v.Verify(t.Context(), token(tt.aud))
		switch {
		case tt.reason == "" && (err != nil || p.Name != "alice"):
			t.Errorf("%s: Verify = %+v, %v; want alice", tt.name, p, err)
		case tt.reason != "" && !isAuthError(err, tt.reason):
			t.Errorf("%s: Verify = %+v, %v; want an *auth.Error containing %q", tt.name, p, err, tt.reason)
		}
	}
}

func TestVerifyAPIKey(t *testing.T) {
	t.Parallel()
	ks := newKeys()
	c := &clock{t: time.Now()}
	v, err := auth.NewVerifier(auth.Config{APIKeys: true}, ks, c.now)
	if err != nil {
		t.Fatal(err)
	}
	expires := c.now().Add(time.Hour)
	good := ks.add(auth.APIKey{ID: 7, Name: "ci", Scopes: []string{"submit"}})
	expiring := ks.add(auth.APIKey{ID: 8, Name: "tmp", Scopes: []string{"read"}, ExpiresAt: &expires})

	p, err := v.Verify(t.Context(), "Bearer "+good)
	if err != nil || p.Kind != auth.KindAPIKey || p.ID != "7" || p.Name != "ci" || !p.Has("submit") || p.Has("read") {
		t.Fatalf("Verify(good) = %+v, %v", p, err)
	}
	if p.Actor() != "api_key:7:ci" || p.RateKey != "key:7" {
		t.Errorf("actor %q, rate key %q", p.Actor(), p.RateKey)
	}

	// Cached: a second use costs no lookup.
	before := ks.lookups.Load()
	if _, err := v.Verify(t.Context(), "Bearer "+good); err != nil {
		t.Fatal(err)
	}
	if ks.lookups.Load() != before {
		t.Error("second Verify looked the key up again")
	}

	// Revoked: refused once the cache entry is older than KeyCacheTTL.
	ks.revoke(good, c.now())
	c.add(auth.KeyCacheTTL)
	if _, err := v.Verify(t.Context(), "Bearer "+good); !isAuthError(err, "revoked") {
		t.Fatalf("revoked key: %v", err)
	}

	// Expiry is checked on every use, cached or not.
	if _, err := v.Verify(t.Context(), "Bearer "+expiring); err != nil {
		t.Fatal(err)
	}
	c.add(time.Hour)
	if _, err := v.Verify(t.Context(), "Bearer "+expiring); !isAuthError(err, "expired") {
		t.Fatalf("expired key: %v", err)
	}

	// Unknown and malformed keys.
	unknown, _ := auth.NewAPIKey()
	if _, err := v.Verify(t.Context(), "Bearer "+unknown); !isAuthError(err, "invalid api key") {
		t.Fatalf("unknown key: %v", err)
	}
	before = ks.lookups.Load()
	for _, bad := range []string{"dts_", "dts_short", unknown + "x", strings.Replace(unknown, unknown[10:11], "!", 1)} {
		if _, err := v.Verify(t.Context(), "Bearer "+bad); !isAuthError(err, "") {
			t.Errorf("Verify(%q) = %v, want an auth error", bad, err)
		}
	}
	if ks.lookups.Load() != before {
		t.Error("malformed keys were looked up")
	}

	// A failing lookup is not the caller's fault: not an *auth.Error.
	ks.mu.Lock()
	ks.fail = errors.New("connection refused")
	ks.mu.Unlock()
	other := ks.add(auth.APIKey{ID: 9})
	_, err = v.Verify(t.Context(), "Bearer "+other)
	var ae *auth.Error
	if err == nil || errors.As(err, &ae) {
		t.Errorf("lookup failure: %v, want a non-auth error", err)
	}

	// API keys on a JWT-only server.
	jv, _ := auth.NewVerifier(auth.Config{JWTSecret: secret}, nil, nil)
	if _, err := jv.Verify(t.Context(), "Bearer "+good); !isAuthError(err, "does not accept API keys") {
		t.Errorf("api key on jwt server: %v", err)
	}
}

func TestVerifyCached(t *testing.T) {
	t.Parallel()
	ks := newKeys()
	c := &clock{t: time.Now()}
	v, err := auth.NewVerifier(auth.Config{JWTSecret: secret, APIKeys: true}, ks, c.now)
	if err != nil {
		t.Fatal(err)
	}
	good := ks.add(auth.APIKey{ID: 7, Name: "ci", Scopes: []string{"submit"}})
	unknown, _ := auth.NewAPIKey()
	exp := c.now().Add(time.Hour).Unix()
	jwtGood := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": exp, "scope": "read"})
	jwtBad := sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), jwt.MapClaims{"sub": "alice", "exp": exp})

	// Uncached keys, good or not, need a lookup; VerifyCached does none.
	for _, k := range []string{good, unknown} {
		if _, err := v.VerifyCached("Bearer " + k); !errors.Is(err, auth.ErrNeedsLookup) {
			t.Fatalf("uncached key: %v, want ErrNeedsLookup", err)
		}
	}
	// Everything else is answered as Verify would.
	if p, err := v.VerifyCached("Bearer " + jwtGood); err != nil || p.Name != "alice" || !p.Has("read") {
		t.Errorf("good JWT: %+v, %v", p, err)
	}
	for _, h := range []string{"Bearer " + jwtBad, "", "Bearer dts_short", "Basic x"} {
		if _, err := v.VerifyCached(h); !isAuthError(err, "") {
			t.Errorf("VerifyCached(%.20q) = %v, want an *auth.Error", h, err)
		}
	}
	if n := ks.lookups.Load(); n != 0 {
		t.Fatalf("VerifyCached looked up %d keys", n)
	}

	// Once Verify has looked a key up, its answer is cached, good or bad.
	for _, k := range []string{good, unknown} {
		_, _ = v.Verify(t.Context(), "Bearer "+k)
	}
	if p, err := v.VerifyCached("Bearer " + good); err != nil || p.ID != "7" {
		t.Errorf("cached good key: %+v, %v", p, err)
	}
	if _, err := v.VerifyCached("Bearer " + unknown); !isAuthError(err, "invalid api key") {
		t.Errorf("cached unknown key: %v", err)
	}
	if n := ks.lookups.Load(); n != 2 {
		t.Fatalf("%d lookups, want the 2 of Verify", n)
	}
	c.add(auth.KeyCacheTTL)
	if _, err := v.VerifyCached("Bearer " + good); !errors.Is(err, auth.ErrNeedsLookup) {
		t.Errorf("expired cache entry: %v, want ErrNeedsLookup", err)
	}
}

func isAuthError(err error, reason string) bool {
	var ae *auth.Error
	return errors.As(err, &ae) && strings.Contains(ae.Reason, reason)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	tests := []struct {
		name string
		cfg  auth.Config
		err  string
	}{
		{"off", auth.Config{}, ""},
		{"short secret", auth.Config{JWTSecret: []byte("short")}, "at least 32"},
		{"not pem", auth.Config{JWTPublicKeyPEM: []byte("hello")}, "no PEM block"},
		{"private key block", auth.Config{JWTPublicKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}})}, "not a public key"},
		{"small rsa", auth.Config{JWTPublicKeyPEM: pemOf(t, &small.PublicKey)}, "1024 bits"},
		{"pkcs1", auth.Config{JWTPublicKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&small.PublicKey)})}, "1024 bits"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.err)
		}
	}
}

func TestScopes(t *testing.T) {
	t.Parallel()
	got, err := auth.ParseScopes("read, submit,read")
	if err != nil || strings.Join(got, ",") != "read,submit" {
		t.Errorf("ParseScopes = %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "root", "read,writ"} {
		if _, err := auth.ParseScopes(bad); err == nil {
			t.Errorf("ParseScopes(%q) accepted", bad)
		}
	}
	admin := auth.Principal{Scopes: []string{"admin"}}
	if !admin.Has("read") || !admin.Has("submit") || !admin.Has("admin") {
		t.Error("admin does not imply read and submit")
	}
	sub := auth.Principal{Scopes: []string{"submit"}}
	if sub.Has("read") || sub.Has("admin") {
		t.Error("submit implies more than submit")
	}
	if auth.Anonymous.Actor() != "anonymous" || !auth.Anonymous.Has("admin") {
		t.Error("anonymous principal")
	}
}

func TestSecrets(t *testing.T) {
	t.Parallel()
	k1, h1 := auth.NewAPIKey()
	k2, _ := auth.NewAPIKey()
	if k1 == k2 || !strings.HasPrefix(k1, "dts_") || len(k1) != 4+43 {
		t.Errorf("keys %q %q", k1, k2)
	}
	if h1 != auth.HashSecret(k1) || len(h1) != 64 || strings.Contains(h1, k1[4:]) {
		t.Errorf("hash %q", h1)
	}
	if _, err := base64.RawURLEncoding.DecodeString(k1[4:]); err != nil {
		t.Error(err)
	}
	c, ch := auth.NewWorkerCredential()
	if !auth.WellFormedWorkerCredential(c) || auth.WellFormedWorkerCredential(k1) || !auth.HashesEqual(ch, auth.HashSecret(c)) {
		t.Errorf("worker credential %q", c)
	}
}

func TestCheckListen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr              string
		enabled, insecure bool
		ok                bool
	}{
		{"127.0.0.1:8000", false, false, true},
		{"127.1.2.3:0", false, false, true},
		{"localhost:8000", false, false, true},
		{"[::1]:8000", false, false, true},
		{"0.0.0.0:0", false, false, false},
		{":8000", false, false, false},
		{"[::]:8000", false, false, false},
		{"10.1.2.3:8000", false, false, false},
		{"example.internal:8000", false, false, false},
		{"0.0.0.0:0", true, false, true},
		{"0.0.0.0:0", false, true, true},
	}
	for _, tt := range tests {
		err := auth.CheckListen(tt.addr, tt.enabled, tt.insecure)
		if (err == nil) != tt.ok {
			t.Errorf("CheckListen(%q, auth %v, insecure %v) = %v, want ok %v", tt.addr, tt.enabled, tt.insecure, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--insecure-no-auth") {
			t.Errorf("error does not name the way out: %v", err)
		}
	}
}
