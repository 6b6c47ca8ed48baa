package main

import (
	"slices"
	"strings"
	"testing"
)

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

// TestParseConfigRedisSentinel: the REDIS_SENTINEL_* variables reach the
// config, and an address without a port stops start-up with an error that
// names the variable.
func TestParseConfigRedisSentinel(t *testing.T) {
	t.Setenv("REDIS_SENTINEL_ADDRS", "127.0.0.1:26379, 127.0.0.1:26380")
	t.Setenv("REDIS_SENTINEL_MASTER", "dts")
	t.Setenv("REDIS_SENTINEL_PASSWORD", "s3cret")
	cfg, err := parseConfig(nil)
	if err != nil || !slices.Equal(cfg.RedisSentinelAddrs, []string{"127.0.0.1:26379", "127.0.0.1:26380"}) ||
		cfg.RedisSentinelMaster != "dts" || cfg.RedisSentinelPassword != "s3cret" {
		t.Fatalf("parsed %q %q %q, %v", cfg.RedisSentinelAddrs, cfg.RedisSentinelMaster, cfg.RedisSentinelPassword, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	t.Setenv("REDIS_SENTINEL_ADDRS", "127.0.0.1:26379,127.0.0.1")
	if _, err := parseConfig(nil); err == nil || !strings.Contains(err.Error(), "REDIS_SENTINEL_ADDRS") {
		t.Fatalf("an address without a port: %v, want an error naming REDIS_SENTINEL_ADDRS", err)
	}
}
