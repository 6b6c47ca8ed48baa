package auth

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Config says which tokens a server accepts. The zero value accepts none:
// auth is off.
type Config struct {
	// JWTSecret is the HS256 key of JWTs. At least 32 bytes. Default none:
	// HS256 tokens are refused.
	JWTSecret []byte
	// JWTPublicKeyPEM is a PEM public key ("PUBLIC KEY", "RSA PUBLIC KEY"
	// or a "CERTIFICATE"): an RSA key (2048 bits or more) verifies RS256
	// tokens, an Ed25519 key EdDSA tokens. Default none.
	JWTPublicKeyPEM []byte
	// JWTIssuer, if set, must equal every JWT's iss claim. Default: not checked.
	JWTIssuer string
	// JWTAudience, if set, must be in every JWT's aud claim (a string, or
	// an array holding it); tokens without aud, or made for another
	// audience, are refused. Default: not checked.
	JWTAudience string
	// APIKeys accepts API keys ("dts_...") found by hash in the database.
	// Default false.
	APIKeys bool
}

// Enabled reports whether any kind of token is configured.
func (c Config) Enabled() bool {
	return len(c.JWTSecret) > 0 || len(c.JWTPublicKeyPEM) > 0 || c.APIKeys
}

// MinJWTSecretLen is the shortest HS256 secret accepted: 256 bits, the
// size of the hash (RFC 7518 section 3.2).
const MinJWTSecretLen = 32

// Validate checks the secret's length and parses the public key.
func (c Config) Validate() error {
	if n := len(c.JWTSecret); n > 0 && n < MinJWTSecretLen {
		return fmt.Errorf("auth: JWT secret is %d bytes; use at least %d random bytes", n, MinJWTSecretLen)
	}
	if len(c.JWTPublicKeyPEM) > 0 {
		if _, _, err := parsePublicKey(c.JWTPublicKeyPEM); err != nil {
			return fmt.Errorf("auth: JWT public key: %w", err)
		}
	}
	return nil
}

// Timing.
const (
	// KeyCacheTTL is the longest an API key lookup is reused: a revoked key
	// stops working at most this long after its revocation.
	KeyCacheTTL = 5 * time.Second
	// JWTLeeway is the clock skew allowed on exp, nbf and iat.
	JWTLeeway = 30 * time.Second
	// MaxTokenLen bounds a bearer token; longer ones are refused unread.
	MaxTokenLen = 8 << 10
	// maxCacheEntries bounds the key cache (unknown keys are cached too, so
	// that one junk key repeated costs one query per KeyCacheTTL).
	maxCacheEntries = 10_000
)

// Error is a failed authentication: the answer is 401. Its message says
// what was wrong with the token and never contains the token.
type Error struct{ Reason string }

func (e *Error) Error() string { return e.Reason }

// Verifier checks bearer tokens. It is safe for concurrent use.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser
	pub    crypto.PublicKey
	pubAlg string // RS256 or EdDSA; "" without a public key
	lookup KeyLookup
	now    func() time.Time
	ttl    time.Duration

	mu    sync.Mutex
	cache map[string]cachedKey // key hash → lookup result
}

type cachedKey struct {
	key     APIKey
	missing bool // no such key
	at      time.Time
}

// NewVerifier returns a verifier for cfg. lookup finds API keys; it may be
// nil when cfg.APIKeys is false. now is the clock (nil: time.Now).
func NewVerifier(cfg Config, lookup KeyLookup, now func() time.Time) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.APIKeys && lookup == nil {
		return nil, errors.New("auth: API keys enabled without a key lookup")
	}
	if now == nil {
		now = time.Now
	}
	v := &Verifier{cfg: cfg, lookup: lookup, now: now, ttl: KeyCacheTTL, cache: map[string]cachedKey{}}
	var methods []string
	if len(cfg.JWTSecret) > 0 {
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	if len(cfg.JWTPublicKeyPEM) > 0 {
		v.pub, v.pubAlg, _ = parsePublicKey(cfg.JWTPublicKeyPEM) // Validate parsed it
		methods = append(methods, v.pubAlg)
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods), // never "none", never an algorithm the key was not made for
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(JWTLeeway),
		jwt.WithTimeFunc(func() time.Time { return v.now() }),
	}
	if cfg.JWTIssuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.JWTIssuer))
	}
	if cfg.JWTAudience != "" {
		opts = append(opts, jwt.WithAudience(cfg.JWTAudience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// Verify authenticates the value of an Authorization header. It returns an
// *Error when the token is missing, malformed, badly signed, expired,
// revoked or unknown; any other error is a failure to look the key up
// (the database), which is not the caller's fault.
func (v *Verifier) Verify(ctx context.Context, authorization string) (Principal, error) {
	token, err := BearerToken(authorization)
	if err != nil {
		return Principal{}, err
	}
	if strings.HasPrefix(token, APIKeyPrefix) {
		return v.verifyAPIKey(ctx, token, true)
	}
	return v.verifyJWT(token)
}

// ErrNeedsLookup is VerifyCached's answer for an API key that only a
// database lookup can judge. It is not an *Error: the token may be good.
var ErrNeedsLookup = errors.New("api key not in the cache: it needs a lookup")

// VerifyCached is Verify without I/O. It gives Verify's answer whenever it
// can without the database: for every JWT (a signature check), for a
// malformed token, and for an API key whose lookup is cached. For any other
// API key it returns ErrNeedsLookup and costs nothing. It lets a caller
// that must keep bad tokens cheap (an address over its budget of failed
// authentications) still serve good ones.
func (v *Verifier) VerifyCached(authorization string) (Principal, error) {
	token, err := BearerToken(authorization)
	if err != nil {
		return Principal{}, err
	}
	if strings.HasPrefix(token, APIKeyPrefix) {
		return v.verifyAPIKey(context.Background(), token, false)
	}
	return v.verifyJWT(token)
}

// BearerToken extracts the token of an "Authorization: Bearer <token>"
// header value. The scheme is case-insensitive (RFC 9110); the token must
// be non-empty, at most MaxTokenLen bytes, and of token68 characters.
func BearerToken(authorization string) (string, error) {
	if authorization == "" {
		return "", &Error{"missing bearer token: send Authorization: Bearer <token>"}
	}
	if len(authorization) > MaxTokenLen+len("Bearer ") {
		return "", &Error{"bearer token too long"}
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", &Error{"malformed Authorization header: want Bearer <token>"}
	}
	token = strings.TrimLeft(token, " ")
	if token == "" || !isToken68(token) {
		return "", &Error{"malformed bearer token"}
	}
	return token, nil
}

// isToken68 reports whether s is made of RFC 9110 token68 characters.
func isToken68(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~+/=", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// claims are the JWT claims read: the registered ones and an OAuth-style
// space-separated scope.
type claims struct {
	jwt.RegisteredClaims
	Scope string `json:"scope"`
}

func (v *Verifier) verifyJWT(token string) (Principal, error) {
	if v.parser == nil || (len(v.cfg.JWTSecret) == 0 && v.pub == nil) {
		return Principal{}, &Error{"invalid token: this server accepts API keys only"}
	}
	var c claims
	_, err := v.parser.ParseWithClaims(token, &c, v.key)
	if err != nil {
		return Principal{}, jwtError(err)
	}
	var scopes []string
	for _, s := range strings.Fields(c.Scope) {
		if ValidScope(s) {
			scopes = append(scopes, s)
		}
	}
	scopes, _ = NormalizeScopes(scopes) // nil if none: authenticated, allowed nothing
	sub := c.Subject
	if sub == "" {
		sub = "(no subject)"
	}
	if len(sub) > 100 {
		sub = sub[:100]
	}
	sum := sha256.Sum256([]byte(token))
	return Principal{Kind: KindJWT, ID: sub, Name: strings.ToValidUTF8(sub, "?"), Scopes: scopes,
		RateKey: "jwt:" + hex.EncodeToString(sum[:8])}, nil
}

// key picks the verification key by the algorithm, which the parser has
// already checked against the allowed methods.
func (v *Verifier) key(t *jwt.Token) (any, error) {
	switch alg := t.Method.Alg(); {
	case alg == jwt.SigningMethodHS256.Alg() && len(v.cfg.JWTSecret) > 0:
		return v.cfg.JWTSecret, nil
	case alg == v.pubAlg && v.pub != nil:
		return v.pub, nil
	}
	return nil, jwt.ErrTokenUnverifiable
}

// jwtError maps golang-jwt's errors to fixed messages: theirs may quote
// parts of the token.
func jwtError(err error) error {
	reason := "invalid token"
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		reason = "malformed token"
	case errors.Is(err, jwt.ErrTokenUnverifiable), errors.Is(err, jwt.ErrTokenSignatureInvalid):
		// golang-jwt reports an algorithm outside WithValidMethods as an
		// invalid signature too.
		reason = "invalid token: bad signature or signing algorithm not accepted"
	case errors.Is(err, jwt.ErrTokenExpired):
		reason = "token expired"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		reason = "invalid token: a required claim is missing (exp; iss and aud when an issuer and an audience are configured)"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		reason = "invalid token: wrong issuer"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		reason = "invalid token: wrong audience"
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		reason = "token not valid yet"
	}
	return &Error{reason}
}

// verifyAPIKey checks an API key, looking it up on a cache miss if lookup
// is true, else answering ErrNeedsLookup.
func (v *Verifier) verifyAPIKey(ctx context.Context, token string, lookup bool) (Principal, error) {
	if !v.cfg.APIKeys {
		return Principal{}, &Error{"invalid token: this server does not accept API keys"}
	}
	if !wellFormed(token, APIKeyPrefix) {
		return Principal{}, &Error{"malformed api key"}
	}
	hash := HashSecret(token)
	now := v.now()
	c, ok := v.cached(hash, now)
	if !ok {
		if !lookup {
			return Principal{}, ErrNeedsLookup
		}
		k, err := v.lookup.APIKeyByHash(ctx, hash)
		switch {
		case errors.Is(err, ErrKeyNotFound):
			c = cachedKey{missing: true, at: now}
		case err != nil:
			return Principal{}, fmt.Errorf("look up api key: %w", err)
		default:
			c = cachedKey{key: k, at: now}
		}
		v.store(hash, c)
	}
	k := c.key
	switch {
	case c.missing:
		return Principal{}, &Error{"invalid api key"}
	case k.RevokedAt != nil:
		return Principal{}, &Error{"api key revoked"}
	case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
		return Principal{}, &Error{"api key expired"}
	}
	id := strconv.FormatInt(k.ID, 10)
	return Principal{Kind: KindAPIKey, ID: id, Name: k.Name, Scopes: k.Scopes, RateKey: "key:" + id}, nil
}

func (v *Verifier) cached(hash string, now time.Time) (cachedKey, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.cache[hash]
	if !ok || now.Sub(c.at) >= v.ttl || now.Before(c.at) {
		return cachedKey{}, false
	}
	return c, true
}

func (v *Verifier) store(hash string, c cachedKey) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.cache) >= maxCacheEntries {
		for h, e := range v.cache {
			if c.at.Sub(e.at) >= v.ttl {
				delete(v.cache, h)
			}
		}
		if len(v.cache) >= maxCacheEntries {
			clear(v.cache)
		}
	}
	v.cache[hash] = c
}

// parsePublicKey reads a PEM public key and names the JWT algorithm it verifies.
func parsePublicKey(data []byte) (crypto.PublicKey, string, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, "", errors.New("no PEM block found")
	}
	var key any
	var err error
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		return nil, "", fmt.Errorf("PEM block %q is not a public key", block.Type)
	}
	if err != nil {
		return nil, "", err
	}
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, "", fmt.Errorf("RSA key of %d bits; want 2048 or more", k.N.BitLen())
		}
		return k, jwt.SigningMethodRS256.Alg(), nil
	case ed25519.PublicKey:
		return k, jwt.SigningMethodEdDSA.Alg(), nil
	}
	return nil, "", fmt.Errorf("unsupported key type %T: want RSA (RS256) or Ed25519 (EdDSA)", key)
}
