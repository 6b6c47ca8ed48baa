// Command submitter serves the scheduler's HTTP API (see package submitter
// and docs/api.md), and manages its API keys. Flags override environment
// variables, which override the defaults (package submitter's Default...
// constants). docs/operations.md lists every flag and variable.
//
// Without any AUTH_* setting auth is off, and the submitter refuses to
// listen on anything but loopback unless -insecure-no-auth is given. The
// JWT secret is not a flag, so that it never shows in ps.
//
// Token management, straight in PostgreSQL (DATABASE_URL or -database-url):
//
//	submitter token create -name NAME -scope submit[,read,admin] [-ttl 720h]   prints the key, once
//	submitter token list
//	submitter token revoke ID
//
// LOG_LEVEL (debug, info, warn, error; default info) sets the log level.
// Logs are JSON when stderr is not a terminal, text otherwise.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dtsched/dts/internal/envconf"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/otelx"
	"github.com/dtsched/dts/internal/retry"
	"github.com/dtsched/dts/submitter"
)

// connectTimeout is how long start-up waits for PostgreSQL and Redis,
// which may still be starting next to us.
const connectTimeout = 30 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "submitter:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "token" {
		return tokenCommand(ctx, args[1:], os.Stdout, os.Stderr)
	}
	envconf.SetGOGC(envconf.ServiceGOGC)
	logger, err := envconf.NewLogger(os.Getenv("LOG_LEVEL"))
	if err != nil {
		return err
	}
	cfg, err := parseConfig(args)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if addr := os.Getenv("PPROF_ADDR"); addr != "" {
		if err := httpx.ServePprof(addr, logger); err != nil {
			return err
		}
	}

	stopTracing, err := otelx.SetupProcess(ctx, "dts-submitter", os.Getenv)
	if err != nil {
		return err
	}
	defer stopTracing()

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	defer ln.Close()

	srv, err := connect(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return srv.Run(ctx, ln)
}

// connect builds the server, retrying for up to connectTimeout while
// PostgreSQL or Redis are not reachable yet; one try gets 5 s.
func connect(ctx context.Context, cfg submitter.Config, logger *slog.Logger) (*submitter.Server, error) {
	return retry.Connect(ctx, logger, "PostgreSQL and Redis", connectTimeout,
		func(ctx context.Context) (*submitter.Server, error) {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return submitter.New(ctx, cfg, logger)
		})
}

func parseConfig(args []string) (submitter.Config, error) {
	fs := flag.NewFlagSet("submitter", flag.ContinueOnError)
	var cfg submitter.Config
	var e envconf.Env
	fs.StringVar(&cfg.Addr, "addr", e.String("SUBMITTER_ADDR", submitter.DefaultAddr), "listen address (SUBMITTER_ADDR)")
	fs.StringVar(&cfg.DatabaseURL, "database-url", e.String("DATABASE_URL", envconf.DefaultDatabaseURL), "PostgreSQL URL (DATABASE_URL)")
	fs.StringVar(&cfg.RedisURL, "redis-url", e.String("REDIS_URL", envconf.DefaultRedisURL), "Redis URL (REDIS_URL)")
	fs.StringVar(&cfg.RedisPrefix, "redis-prefix", e.String("REDIS_PREFIX", ""), "prefix of every Redis key (REDIS_PREFIX)")
	sentinelAddrs := fs.String("redis-sentinel-addrs", e.String("REDIS_SENTINEL_ADDRS", ""),
		"Redis Sentinel addresses, host:port,...; empty: no Sentinel, the host of -redis-url is the server (REDIS_SENTINEL_ADDRS)")
	fs.StringVar(&cfg.RedisSentinelMaster, "redis-sentinel-master", e.String("REDIS_SENTINEL_MASTER", ""),
		"name of the Redis master the sentinels monitor (REDIS_SENTINEL_MASTER)")
	maxPayload := e.Int("MAX_PAYLOAD_BYTES", submitter.DefaultMaxPayloadBytes)
	fs.IntVar(&cfg.MaxPayloadBytes, "max-payload-bytes", maxPayload, "largest job payload in bytes (MAX_PAYLOAD_BYTES)")
	secretFile := fs.String("auth-jwt-secret-file", e.String("AUTH_JWT_SECRET_FILE", ""),
		"file holding the HS256 secret of JWTs (AUTH_JWT_SECRET_FILE; or the secret itself in AUTH_JWT_SECRET)")
	keyFile := fs.String("auth-jwt-public-key-file", e.String("AUTH_JWT_PUBLIC_KEY_FILE", ""),
		"PEM public key of JWTs: RSA for RS256, Ed25519 for EdDSA (AUTH_JWT_PUBLIC_KEY_FILE)")
	fs.StringVar(&cfg.Auth.JWTIssuer, "auth-jwt-issuer", e.String("AUTH_JWT_ISSUER", ""), "required iss claim of JWTs (AUTH_JWT_ISSUER)")
	fs.StringVar(&cfg.Auth.JWTAudience, "auth-jwt-audience", e.String("AUTH_JWT_AUDIENCE", ""), "audience every JWT's aud claim must hold (AUTH_JWT_AUDIENCE)")
	fs.BoolVar(&cfg.Auth.APIKeys, "auth-api-keys", e.Bool("AUTH_API_KEYS", false),
		"accept API keys made by 'submitter token create' (AUTH_API_KEYS)")
	fs.BoolVar(&cfg.InsecureNoAuth, "insecure-no-auth", e.Bool("INSECURE_NO_AUTH", false),
		"allow a non-loopback address without auth (INSECURE_NO_AUTH)")
	fs.Float64Var(&cfg.RateLimitRPS, "rate-limit-rps", e.Float("RATE_LIMIT_RPS", submitter.DefaultRateLimitRPS),
		"requests a second per token, or per client IP without auth; negative: no limit (RATE_LIMIT_RPS)")
	fs.IntVar(&cfg.RateLimitBurst, "rate-limit-burst", e.Int("RATE_LIMIT_BURST", submitter.DefaultRateLimitBurst),
		"requests a caller may send at once above its rate (RATE_LIMIT_BURST)")
	fs.IntVar(&cfg.MaxConcurrentRequests, "max-concurrent-requests", e.Int("MAX_CONCURRENT_REQUESTS", submitter.DefaultMaxConcurrentRequests),
		"API requests in progress before 503 overloaded; negative: no cap (MAX_CONCURRENT_REQUESTS)")
	inflightBody := fs.Int("max-inflight-body-bytes", e.Int("MAX_INFLIGHT_BODY_BYTES", submitter.DefaultMaxInflightBodyBytes),
		"bytes of API request bodies in progress before 503 overloaded; negative: no bound (MAX_INFLIGHT_BODY_BYTES)")
	fs.Int64Var(&cfg.MaxBacklog, "max-backlog", int64(e.Int("MAX_BACKLOG", submitter.DefaultMaxBacklog)),
		"due jobs waiting for a worker before submissions get 503 backlog_full; 0: no bound (MAX_BACKLOG)")
	fs.BoolVar(&cfg.RejectUnknownJobNames, "reject-unknown-job-names", e.Bool("REJECT_UNKNOWN_JOB_NAMES", submitter.DefaultRejectUnknownJobNames),
		"answer 400 unknown_job_name to a job whose name no worker handles (REJECT_UNKNOWN_JOB_NAMES)")
	fs.StringVar(&cfg.UIBasePath, "ui-base-path", e.String("UI_BASE_PATH", submitter.DefaultUIBasePath),
		"path of the operations console (UI_BASE_PATH)")
	fs.StringVar(&cfg.GrafanaURL, "grafana-url", e.String("GRAFANA_URL", submitter.DefaultGrafanaURL),
		"Grafana's base URL: the console's charts link to its dts dashboard; empty: no links (GRAFANA_URL)")
	fs.StringVar(&cfg.TraceURL, "trace-url", e.String("TRACE_URL", submitter.DefaultTraceURL),
		"link of a trace, {trace_id} standing for its id: the console's Job page links to the job's trace; empty: no link (TRACE_URL)")
	if err := e.Err(); err != nil {
		return cfg, err
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	cfg.MaxInflightBodyBytes = int64(*inflightBody)
	var err error
	if cfg.RedisSentinelAddrs, err = envconf.HostPorts("REDIS_SENTINEL_ADDRS", *sentinelAddrs); err != nil {
		return cfg, err
	}
	// The password only from the environment, never a flag (ps shows those).
	cfg.RedisSentinelPassword = os.Getenv("REDIS_SENTINEL_PASSWORD")
	// A payload limit above the default body limit raises the body limit too.
	if limit := int64(cfg.MaxPayloadBytes) + 64<<10; limit > submitter.DefaultMaxBodyBytes {
		cfg.MaxBodyBytes = limit
	}
	if err := cfg.Auth.LoadJWTKeys(os.Getenv("AUTH_JWT_SECRET"), *secretFile, *keyFile); err != nil {
		return cfg, err
	}
	return cfg, nil
}
