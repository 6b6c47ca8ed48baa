// Command coordinator runs a dts coordinator: leader or standby.
// Flags and environment variables are listed in docs/operations.md; the
// security ones in docs/security.md:
//
//	(environment only)           AUTH_JWT_SECRET             "" (HS256 key of tokens for /workers)
//	-auth-jwt-secret-file        AUTH_JWT_SECRET_FILE        ""
//	-auth-jwt-public-key-file    AUTH_JWT_PUBLIC_KEY_FILE    ""
//	-auth-jwt-issuer             AUTH_JWT_ISSUER             ""
//	-auth-api-keys               AUTH_API_KEYS               false
//	-require-worker-credentials  REQUIRE_WORKER_CREDENTIALS  true when any AUTH_* is set, else false
//	-insecure-no-auth            INSECURE_NO_AUTH            false
//
// Worker credentials, straight in PostgreSQL (DATABASE_URL or -database-url):
//
//	coordinator worker-credential create -worker-id ID   prints the secret (WORKER_CREDENTIAL), once
//	coordinator worker-credential list
//	coordinator worker-credential revoke -worker-id ID
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dtsched/dts/coordinator"
	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(1)
	}
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
		fmt.Fprintf(os.Stderr, "coordinator: ignoring %s=%q: not a duration\n", name, v)
	}
	return def
}

func envInt(name string, def int) int {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
		fmt.Fprintf(os.Stderr, "coordinator: ignoring %s=%q: not a number\n", name, v)
	}
	return def
}

func envFloat(name string, def float64) float64 {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
		fmt.Fprintf(os.Stderr, "coordinator: ignoring %s=%q: not a number\n", name, v)
	}
	return def
}

func newLogger() *slog.Logger {
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(env("LOG_LEVEL", "info")))
	opts := &slog.HandlerOptions{Level: level}
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, opts))
}

func run() error {
	if len(os.Args) > 1 && os.Args[1] == "worker-credential" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return credentialCommand(ctx, os.Args[2:], os.Stdout, os.Stderr)
	}
	var cfg coordinator.Config
	addr := flag.String("addr", env("COORDINATOR_ADDR", "127.0.0.1:9000"), "HTTP listen address (healthz, readyz, metrics, workers) [COORDINATOR_ADDR]")
	flag.StringVar(&cfg.ID, "id", env("COORDINATOR_ID", ""), "coordinator id; default hostname-pid [COORDINATOR_ID]")
	flag.StringVar(&cfg.DatabaseURL, "database-url", env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/dts?sslmode=disable"), "PostgreSQL URL [DATABASE_URL]")
	flag.StringVar(&cfg.RedisURL, "redis-url", env("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL [REDIS_URL]")
	flag.StringVar(&cfg.RedisPrefix, "redis-prefix", env("REDIS_PREFIX", ""), "prefix of every Redis key [REDIS_PREFIX]")
	flag.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", envDuration("HEARTBEAT_INTERVAL", time.Second), "expected worker heartbeat interval [HEARTBEAT_INTERVAL]")
	flag.IntVar(&cfg.HeartbeatMisses, "heartbeat-misses", envInt("HEARTBEAT_MISSES", 3), "missed heartbeats before a worker is unavailable [HEARTBEAT_MISSES]")
	flag.DurationVar(&cfg.LeaseDuration, "lease-duration", envDuration("LEASE_DURATION", 10*time.Second), "lease length, extended by heartbeats [LEASE_DURATION]")
	flag.DurationVar(&cfg.Backoff.Base, "backoff-base", envDuration("BACKOFF_BASE", time.Second), "retry backoff after the first failure [BACKOFF_BASE]")
	flag.DurationVar(&cfg.Backoff.Cap, "backoff-cap", envDuration("BACKOFF_CAP", 5*time.Minute), "largest retry backoff [BACKOFF_CAP]")
	flag.Float64Var(&cfg.Backoff.Jitter, "backoff-jitter", envFloat("BACKOFF_JITTER", 0.5), "random share of each backoff, 0..1 [BACKOFF_JITTER]")
	flag.DurationVar(&cfg.PollInterval, "poll-interval", envDuration("POLL_INTERVAL", 250*time.Millisecond), "longest wait between looks for due jobs [POLL_INTERVAL]")
	flag.IntVar(&cfg.ClaimBatch, "claim-batch", envInt("CLAIM_BATCH", 1000), "most jobs leased per statement [CLAIM_BATCH]")
	flag.DurationVar(&cfg.ElectionInterval, "election-interval", envDuration("ELECTION_INTERVAL", time.Second), "leader lock poll and check interval [ELECTION_INTERVAL]")
	flag.DurationVar(&cfg.RetentionCompleted, "retention-completed", envDuration("RETENTION_COMPLETED", 24*time.Hour), "keep completed and canceled jobs this long [RETENTION_COMPLETED]")
	flag.DurationVar(&cfg.RetentionFailed, "retention-failed", envDuration("RETENTION_FAILED", 7*24*time.Hour), "keep failed (dead) jobs this long [RETENTION_FAILED]")
	secretFile := flag.String("auth-jwt-secret-file", env("AUTH_JWT_SECRET_FILE", ""), "file holding the HS256 secret of JWTs; or the secret itself in AUTH_JWT_SECRET [AUTH_JWT_SECRET_FILE]")
	keyFile := flag.String("auth-jwt-public-key-file", env("AUTH_JWT_PUBLIC_KEY_FILE", ""), "PEM public key of JWTs: RSA (RS256) or Ed25519 (EdDSA) [AUTH_JWT_PUBLIC_KEY_FILE]")
	flag.StringVar(&cfg.Auth.Tokens.JWTIssuer, "auth-jwt-issuer", env("AUTH_JWT_ISSUER", ""), "required iss claim of JWTs [AUTH_JWT_ISSUER]")
	flag.BoolVar(&cfg.Auth.Tokens.APIKeys, "auth-api-keys", envBool("AUTH_API_KEYS", false), "accept API keys made by 'submitter token create' [AUTH_API_KEYS]")
	requireCreds := flag.String("require-worker-credentials", env("REQUIRE_WORKER_CREDENTIALS", ""), "refuse heartbeats without a valid worker credential (true/false); default true when any AUTH_* is set [REQUIRE_WORKER_CREDENTIALS]")
	flag.BoolVar(&cfg.Auth.InsecureNoAuth, "insecure-no-auth", envBool("INSECURE_NO_AUTH", false), "allow a non-loopback -addr without tokens [INSECURE_NO_AUTH]")
	flag.Parse()
	if err := authConfig(&cfg.Auth, *secretFile, *keyFile, *requireCreds); err != nil {
		return err
	}
	// Refuse a public address without auth before listening, and without
	// the retries below (they are for PostgreSQL and Redis starting up).
	if err := cfg.Auth.Tokens.Validate(); err != nil {
		return err
	}
	if err := auth.CheckListen(*addr, cfg.Auth.Tokens.Enabled(), cfg.Auth.InsecureNoAuth); err != nil {
		return err
	}

	log := newLogger()
	if addr := env("PPROF_ADDR", ""); addr != "" {
		if err := httpx.ServePprof(addr, log); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	var c *coordinator.Coordinator
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err = coordinator.New(ctx, cfg, log)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			ln.Close()
			return err
		}
		log.Warn("waiting for PostgreSQL and Redis", "err", err)
		time.Sleep(time.Second)
	}
	return c.Run(ctx, ln)
}

func envBool(name string, def bool) bool {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
		fmt.Fprintf(os.Stderr, "coordinator: ignoring %s=%q: not true or false\n", name, v)
	}
	return def
}

// authConfig fills in what flags cannot hold directly: the JWT secret (from
// the environment or a file, never a flag, so that it does not show in ps),
// the public key file, and the tri-state REQUIRE_WORKER_CREDENTIALS.
func authConfig(a *coordinator.AuthConfig, secretFile, keyFile, requireCreds string) error {
	if v := os.Getenv("AUTH_JWT_SECRET"); v != "" {
		a.Tokens.JWTSecret = []byte(v)
	}
	if secretFile != "" {
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return fmt.Errorf("JWT secret: %w", err)
		}
		a.Tokens.JWTSecret = bytes.TrimSpace(b)
	}
	if keyFile != "" {
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return fmt.Errorf("JWT public key: %w", err)
		}
		a.Tokens.JWTPublicKeyPEM = b
	}
	if requireCreds != "" {
		b, err := strconv.ParseBool(requireCreds)
		if err != nil {
			return fmt.Errorf("-require-worker-credentials %q: want true or false", requireCreds)
		}
		a.RequireWorkerCredentials = &b
	}
	return nil
}
