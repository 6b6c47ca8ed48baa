package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestRunRefusesPublicAddrWithoutAuth(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		err := run(t.Context(), []string{"-addr", addr})
		if err == nil || !strings.Contains(err.Error(), "--insecure-no-auth") {
			t.Errorf("run -addr %s = %v, want a refusal naming --insecure-no-auth", addr, err)
		}
	}
}

func TestTokenCommand(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	tok := func(args ...string) (string, string, error) {
		var stdout, stderr bytes.Buffer
		err := tokenCommand(t.Context(), append(args, "-database-url", dbURL), &stdout, &stderr)
		return stdout.String(), stderr.String(), err
	}
	out, info, err := tok("create", "-name", "ci", "-scope", "submit,read", "-ttl", "720h")
	if err != nil {
		t.Fatal(err, info)
	}
	key := strings.TrimSpace(out)
	if !strings.HasPrefix(key, "dts_") || strings.Count(out, "\n") != 1 || !strings.Contains(info, "shown once") {
		t.Fatalf("create printed %q / %q", out, info)
	}
	out, _, err = tok("list")
	if err != nil || !strings.Contains(out, "ci") || !strings.Contains(out, "read,submit") || strings.Contains(out, key) {
		t.Fatalf("list = %q, %v", out, err)
	}
	out, _, err = tok("revoke", "1")
	if err != nil || !strings.Contains(out, "revoked token 1") {
		t.Fatalf("revoke = %q, %v", out, err)
	}
	out, _, _ = tok("list")
	if strings.Count(out, "\n") != 2 || strings.Contains(strings.Split(out, "\n")[1], "  -  ") {
		t.Errorf("list after revoke = %q", out)
	}
	for _, bad := range [][]string{
		{"create", "-name", "x"},
		{"create", "-name", "x", "-scope", "root"},
		{"create", "-name", "x", "-scope", "read", "-ttl", "-1h"},
		{"revoke"},
		{"revoke", "abc"},
		{"revoke", "99"},
		{"frobnicate"},
	} {
		if _, _, err := tok(bad...); err == nil {
			t.Errorf("token %v succeeded", bad)
		}
	}
}
