// Command coordinator runs a dts coordinator: leader or standby.
// Flags and environment variables are listed in docs/operations.md; the
// security ones in docs/security.md:
//
//	(environment only)           AUTH_JWT_SECRET             "" (HS256 key of tokens for /workers)
//	-auth-jwt-secret-file        AUTH_JWT_SECRET_FILE        ""
//	-auth-jwt-public-key-file    AUTH_JWT_PUBLIC_KEY_FILE    ""
//	-auth-jwt-issuer             AUTH_JWT_ISSUER             ""
//	-auth-jwt-audience           AUTH_JWT_AUDIENCE           ""
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
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dtsched/dts/coordinator"
	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/envconf"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/otelx"
	"github.com/dtsched/dts/internal/retry"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(1)
	}
}

func run() error {
	envconf.SetGOGC(envconf.ServiceGOGC)
	var e envconf.Env
	if len(os.Args) > 1 && os.Args[1] == "worker-credential" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return credentialCommand(ctx, os.Args[2:], os.Stdout, os.Stderr)
	}
	var cfg coordinator.Config
	addr := flag.String("addr", e.String("COORDINATOR_ADDR", coordinator.DefaultAddr), "HTTP listen address (healthz, readyz, metrics, workers) [COORDINATOR_ADDR]")
	flag.StringVar(&cfg.ID, "id", e.String("COORDINATOR_ID", ""), "coordinator id; default hostname-pid [COORDINATOR_ID]")
	flag.StringVar(&cfg.DatabaseURL, "database-url", e.String("DATABASE_URL", envconf.DefaultDatabaseURL), "PostgreSQL URL [DATABASE_URL]")
	flag.StringVar(&cfg.RedisURL, "redis-url", e.String("REDIS_URL", envconf.DefaultRedisURL), "Redis URL [REDIS_URL]")
	flag.StringVar(&cfg.RedisPrefix, "redis-prefix", e.String("REDIS_PREFIX", ""), "prefix of every Redis key [REDIS_PREFIX]")
	sentinelAddrs := flag.String("redis-sentinel-addrs", e.String("REDIS_SENTINEL_ADDRS", ""), "Redis Sentinel addresses, host:port,...; empty: no Sentinel, the host of -redis-url is the server [REDIS_SENTINEL_ADDRS]")
	flag.StringVar(&cfg.RedisSentinelMaster, "redis-sentinel-master", e.String("REDIS_SENTINEL_MASTER", ""), "name of the Redis master the sentinels monitor [REDIS_SENTINEL_MASTER]")
	flag.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", e.Duration("HEARTBEAT_INTERVAL", coordinator.DefaultHeartbeatInterval), "expected worker heartbeat interval [HEARTBEAT_INTERVAL]")
	flag.IntVar(&cfg.HeartbeatMisses, "heartbeat-misses", e.Int("HEARTBEAT_MISSES", coordinator.DefaultHeartbeatMisses), "missed heartbeats before a worker is unavailable [HEARTBEAT_MISSES]")
	flag.DurationVar(&cfg.LeaseDuration, "lease-duration", e.Duration("LEASE_DURATION", coordinator.DefaultLeaseDuration), "lease length, extended by heartbeats [LEASE_DURATION]")
	flag.DurationVar(&cfg.Backoff.Base, "backoff-base", e.Duration("BACKOFF_BASE", job.DefaultBackoff.Base), "retry backoff after the first failure [BACKOFF_BASE]")
	flag.DurationVar(&cfg.Backoff.Cap, "backoff-cap", e.Duration("BACKOFF_CAP", job.DefaultBackoff.Cap), "largest retry backoff [BACKOFF_CAP]")
	flag.Float64Var(&cfg.Backoff.Jitter, "backoff-jitter", e.Float("BACKOFF_JITTER", job.DefaultBackoff.Jitter), "random share of each backoff, 0..1 [BACKOFF_JITTER]")
	flag.DurationVar(&cfg.PollInterval, "poll-interval", e.Duration("POLL_INTERVAL", coordinator.DefaultPollInterval), "longest wait between looks for due jobs [POLL_INTERVAL]")
	flag.IntVar(&cfg.ClaimBatch, "claim-batch", e.Int("CLAIM_BATCH", coordinator.DefaultClaimBatch), "most jobs leased per statement [CLAIM_BATCH]")
	flag.IntVar(&cfg.ClaimBytes, "claim-bytes", e.Int("CLAIM_BYTES", coordinator.DefaultClaimBytes), "about the most payload bytes leased per claim statement [CLAIM_BYTES]")
	flag.DurationVar(&cfg.ElectionInterval, "election-interval", e.Duration("ELECTION_INTERVAL", coordinator.DefaultElectionInterval), "how often a standby tries to take the leader lease and the leader renews it [ELECTION_INTERVAL]")
	flag.DurationVar(&cfg.LeaderTTL, "leader-ttl", e.Duration("LEADER_TTL", 0), fmt.Sprintf("how long the leader lease lasts unless renewed (0: %d x election interval) [LEADER_TTL]", coordinator.DefaultLeaderTTLIntervals))
	flag.DurationVar(&cfg.RetentionCompleted, "retention-completed", e.Duration("RETENTION_COMPLETED", coordinator.DefaultRetentionCompleted), "keep completed and canceled jobs this long [RETENTION_COMPLETED]")
	flag.DurationVar(&cfg.RetentionFailed, "retention-failed", e.Duration("RETENTION_FAILED", coordinator.DefaultRetentionFailed), "keep failed (dead) jobs this long [RETENTION_FAILED]")
	flag.DurationVar(&cfg.ScheduleGrace, "schedule-grace", e.Duration("SCHEDULE_GRACE", coordinator.DefaultScheduleGrace), "how late a periodic job's tick may still be enqueued; later ones follow the schedule's catch-up policy [SCHEDULE_GRACE]")
	secretFile := flag.String("auth-jwt-secret-file", e.String("AUTH_JWT_SECRET_FILE", ""), "file holding the HS256 secret of JWTs; or the secret itself in AUTH_JWT_SECRET [AUTH_JWT_SECRET_FILE]")
	keyFile := flag.String("auth-jwt-public-key-file", e.String("AUTH_JWT_PUBLIC_KEY_FILE", ""), "PEM public key of JWTs: RSA (RS256) or Ed25519 (EdDSA) [AUTH_JWT_PUBLIC_KEY_FILE]")
	flag.StringVar(&cfg.Auth.Tokens.JWTIssuer, "auth-jwt-issuer", e.String("AUTH_JWT_ISSUER", ""), "required iss claim of JWTs [AUTH_JWT_ISSUER]")
	flag.StringVar(&cfg.Auth.Tokens.JWTAudience, "auth-jwt-audience", e.String("AUTH_JWT_AUDIENCE", ""), "audience every JWT's aud claim must hold [AUTH_JWT_AUDIENCE]")
	flag.BoolVar(&cfg.Auth.Tokens.APIKeys, "auth-api-keys", e.Bool("AUTH_API_KEYS", false), "accept API keys made by 'submitter token create' [AUTH_API_KEYS]")
	requireCreds := flag.String("require-worker-credentials", e.String("REQUIRE_WORKER_CREDENTIALS", ""), "refuse heartbeats without a valid worker credential (true/false); default true when any AUTH_* is set [REQUIRE_WORKER_CREDENTIALS]")
	flag.BoolVar(&cfg.Auth.InsecureNoAuth, "insecure-no-auth", e.Bool("INSECURE_NO_AUTH", false), "allow a non-loopback -addr without tokens [INSECURE_NO_AUTH]")
	flag.Parse()
	if err := e.Err(); err != nil {
		return err
	}
	var err error
	if cfg.RedisSentinelAddrs, err = envconf.HostPorts("REDIS_SENTINEL_ADDRS", *sentinelAddrs); err != nil {
		return err
	}
	// The password only from the environment, never a flag (ps shows those).
	cfg.RedisSentinelPassword = os.Getenv("REDIS_SENTINEL_PASSWORD")
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

	log, err := envconf.NewLogger(os.Getenv("LOG_LEVEL"))
	if err != nil {
		return err
	}
	if addr := e.String("PPROF_ADDR", ""); addr != "" {
		if err := httpx.ServePprof(addr, log); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	stopTracing, err := otelx.SetupProcess(ctx, "dts-coordinator", os.Getenv)
	if err != nil {
		return err
	}
	defer stopTracing()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	c, err := retry.Connect(ctx, log, "PostgreSQL and Redis", 30*time.Second,
		func(ctx context.Context) (*coordinator.Coordinator, error) { return coordinator.New(ctx, cfg, log) })
	if err != nil {
		ln.Close()
		return err
	}
	return c.Run(ctx, ln)
}

// authConfig fills in what flags cannot hold directly: the JWT secret (from
// the environment or a file, never a flag, so that it does not show in ps),
// the public key file, and the tri-state REQUIRE_WORKER_CREDENTIALS.
func authConfig(a *coordinator.AuthConfig, secretFile, keyFile, requireCreds string) error {
	if err := a.Tokens.LoadJWTKeys(os.Getenv("AUTH_JWT_SECRET"), secretFile, keyFile); err != nil {
		return err
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
