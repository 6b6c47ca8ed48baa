package auth

import (
	"bytes"
	"fmt"
	"os"
)

// LoadJWTKeys fills c's JWT keys the way every main takes them. secret is
// the HS256 secret itself (mains pass AUTH_JWT_SECRET: the environment,
// never a flag, so that it does not show in ps); secretFile, if set, is a
// file holding the secret, which then wins, trimmed of surrounding white
// space; publicKeyFile, if set, is a PEM public key file (see
// JWTPublicKeyPEM). Empty arguments leave their field as it is. The keys are
// checked by Validate, not here.
func (c *Config) LoadJWTKeys(secret, secretFile, publicKeyFile string) error {
	if secret != "" {
		c.JWTSecret = []byte(secret)
	}
	if secretFile != "" {
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return fmt.Errorf("JWT secret: %w", err)
		}
		c.JWTSecret = bytes.TrimSpace(b)
	}
	if publicKeyFile != "" {
		b, err := os.ReadFile(publicKeyFile)
		if err != nil {
			return fmt.Errorf("JWT public key: %w", err)
		}
		c.JWTPublicKeyPEM = b
	}
	return nil
}
