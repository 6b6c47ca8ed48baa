package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// Prefixes of the secrets this package makes. They let a reader (and a
// secret scanner) tell what a leaked string is, and let Verify tell an API
// key from a JWT without trying both.
const (
	APIKeyPrefix           = "dts_"
	WorkerCredentialPrefix = "dtsw_"
)

// secretBytes is the entropy of every secret: 256 bits.
const secretBytes = 32

// secretLen is the length of the base64url (unpadded) body of a secret.
var secretLen = base64.RawURLEncoding.EncodedLen(secretBytes)

// NewAPIKey returns a new API key ("dts_" + 43 base64url characters) and
// the hash to store for it. The key is shown once and never stored.
func NewAPIKey() (key, hash string) { return newSecret(APIKeyPrefix) }

// NewWorkerCredential returns a new worker credential ("dtsw_" + 43
// base64url characters) and the hash to store for it.
func NewWorkerCredential() (secret, hash string) { return newSecret(WorkerCredentialPrefix) }

func newSecret(prefix string) (secret, hash string) {
	b := make([]byte, secretBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return an error)
	secret = prefix + base64.RawURLEncoding.EncodeToString(b)
	return secret, HashSecret(secret)
}

// HashSecret is the stored form of a secret: its SHA-256, in hex.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// wellFormed reports whether s looks like a secret with prefix: the prefix
// and exactly secretLen base64url characters. A malformed key is refused
// without a database query.
func wellFormed(s, prefix string) bool {
	body, ok := strings.CutPrefix(s, prefix)
	if !ok || len(body) != secretLen {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// WellFormedWorkerCredential reports whether s has the shape of a worker
// credential.
func WellFormedWorkerCredential(s string) bool { return wellFormed(s, WorkerCredentialPrefix) }

// HashesEqual compares two hex hashes in constant time.
func HashesEqual(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
