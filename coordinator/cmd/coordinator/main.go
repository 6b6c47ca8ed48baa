// Command coordinator runs a dts coordinator: leader or standby.
// Flags and environment variables are listed in docs/operations.md.
package main

import (
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
	flag.Parse()

	log := newLogger()
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
