package auth

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLoadJWTKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	keyFile := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(secretFile, []byte("  from-the-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte("PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                        string
		secret, secretFile, keyFile string
		wantSecret, wantKey         string
		wantErr                     bool
	}{
		{name: "nothing"},
		{name: "secret", secret: "s", wantSecret: "s"},
		{name: "the file wins, trimmed", secret: "s", secretFile: secretFile, wantSecret: "from-the-file"},
		{name: "public key", keyFile: keyFile, wantKey: "PEM"},
		{name: "missing secret file", secretFile: filepath.Join(dir, "none"), wantErr: true},
		{name: "missing key file", keyFile: filepath.Join(dir, "none"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var c Config
			err := c.LoadJWTKeys(tt.secret, tt.secretFile, tt.keyFile)
			if (err != nil) != tt.wantErr {
				t.Fatalf("LoadJWTKeys: %v, want error %v", err, tt.wantErr)
			}
			if string(c.JWTSecret) != tt.wantSecret || string(c.JWTPublicKeyPEM) != tt.wantKey {
				t.Fatalf("got secret %q, key %q; want %q, %q", c.JWTSecret, c.JWTPublicKeyPEM, tt.wantSecret, tt.wantKey)
			}
		})
	}
}
