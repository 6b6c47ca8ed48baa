package main

import "testing"

// TestParseConfigJWTAudience: AUTH_JWT_AUDIENCE reaches the verifier's
// config, and the flag wins over it; unset, the audience is not checked.
func TestParseConfigJWTAudience(t *testing.T) {
	cfg, err := parseConfig(nil)
	if err != nil || cfg.Auth.JWTAudience != "" {
		t.Fatalf("default: %q, %v; want \"\" (not checked)", cfg.Auth.JWTAudience, err)
	}
	t.Setenv("AUTH_JWT_AUDIENCE", "dts-env")
	if cfg, err = parseConfig(nil); err != nil || cfg.Auth.JWTAudience != "dts-env" {
		t.Fatalf("from the environment: %q, %v", cfg.Auth.JWTAudience, err)
	}
	if cfg, err = parseConfig([]string{"-auth-jwt-audience", "dts-flag"}); err != nil || cfg.Auth.JWTAudience != "dts-flag" {
		t.Fatalf("from the flag: %q, %v", cfg.Auth.JWTAudience, err)
	}
}
