package auth_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/dtsched/dts/internal/auth"
)

// fuzzEdKey is a fixed Ed25519 key, so that seeds signed with it stay valid.
var fuzzEdKey = ed25519.NewKeyFromSeed([]byte("dts-fuzz-seed-0123456789abcdef!!"))

// FuzzAuthHeader feeds arbitrary Authorization header values through the
// whole verification path (bearer parsing, JWT parsing and signature checks
// for HS256 and EdDSA, API key shape checks and lookup). It must never
// panic, must answer either a principal or an error, and its errors must
// not quote the token. Seeds are in testdata/fuzz/FuzzAuthHeader.
func FuzzAuthHeader(f *testing.F) {
	ks := newKeys()
	key := ks.add(auth.APIKey{ID: 1, Name: "fuzz", Scopes: []string{"read"}})
	cfg := auth.Config{JWTSecret: secret, JWTPublicKeyPEM: pemOf(f, fuzzEdKey.Public()), JWTIssuer: "dts", APIKeys: true}
	v, err := auth.NewVerifier(cfg, ks, nil)
	if err != nil {
		f.Fatal(err)
	}
	exp := time.Now().Add(24 * time.Hour).Unix()
	f.Add("Bearer " + key)
	f.Add("Bearer " + sign(f, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "iss": "dts", "exp": exp, "scope": "read"}))
	f.Add("Bearer " + sign(f, jwt.SigningMethodEdDSA, fuzzEdKey, jwt.MapClaims{"iss": "dts", "exp": exp}))
	f.Add("Bearer " + sign(f, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"exp": exp}))
	f.Add("Bearer e30.e30.")
	f.Add("bearer    x.y.z")
	f.Add("")
	f.Fuzz(func(t *testing.T, header string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		// VerifyCached answers like Verify, or ErrNeedsLookup.
		if p, err := v.VerifyCached(header); err == nil {
			if p.Kind == "" || p.RateKey == "" {
				t.Fatalf("VerifyCached accepted %q with an empty principal %+v", header, p)
			}
		} else if ae := (*auth.Error)(nil); !errors.Is(err, auth.ErrNeedsLookup) && !errors.As(err, &ae) {
			t.Fatalf("VerifyCached(%q) = %v: neither ErrNeedsLookup nor an *auth.Error", header, err)
		}
		p, err := v.Verify(ctx, header)
		if err == nil {
			if p.Kind == "" || p.RateKey == "" {
				t.Fatalf("accepted %q with an empty principal %+v", header, p)
			}
			return
		}
		var ae *auth.Error
		if !errors.As(err, &ae) {
			t.Fatalf("Verify(%q) = %v: not an *auth.Error", header, err)
		}
		tok, _, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(header), "Bearer")), " ")
		if len(tok) >= 8 && strings.Contains(err.Error(), tok) {
			t.Fatalf("error %q quotes the token", err)
		}
	})
}
