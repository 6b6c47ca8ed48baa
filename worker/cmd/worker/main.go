// Command worker runs a dts worker with the built-in handlers (see package
// builtin). Flags and environment variables are listed in docs/operations.md.
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
	"strings"
	"syscall"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/worker"
	"github.com/dtsched/dts/worker/builtin"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
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
	if v := env(name, ""); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
		fmt.Fprintf(os.Stderr, "worker: ignoring %s=%q: not a duration\n", name, v)
	}
	return def
}

func envInt(name string, def int) int {
	if v := env(name, ""); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
		fmt.Fprintf(os.Stderr, "worker: ignoring %s=%q: not a number\n", name, v)
	}
	return def
}

func envBool(name string, def bool) bool {
	if v := env(name, ""); v != "" {
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
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
	var cfg worker.Config
	var bcfg builtin.Config
	defAddr := "127.0.0.1:7001"
	if v, ok := os.LookupEnv("WORKER_ADDR"); ok {
		defAddr = v // empty turns the HTTP listener off
	}
	addr := flag.String("addr", defAddr, "HTTP listen address for healthz and metrics; empty: none [WORKER_ADDR]")
	flag.StringVar(&cfg.ID, "id", env("WORKER_ID", ""), "worker id, unique in the fleet; default hostname-pid [WORKER_ID]")
	flag.StringVar(&cfg.RedisURL, "redis-url", env("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL [REDIS_URL]")
	flag.StringVar(&cfg.RedisPrefix, "redis-prefix", env("REDIS_PREFIX", ""), "prefix of every Redis key [REDIS_PREFIX]")
	flag.IntVar(&cfg.Concurrency, "concurrency", envInt("WORKER_CONCURRENCY", 8), "jobs run at once [WORKER_CONCURRENCY]")
	flag.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", envDuration("HEARTBEAT_INTERVAL", time.Second), "heartbeat interval; match the coordinator's [HEARTBEAT_INTERVAL]")
	flag.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", envDuration("SHUTDOWN_GRACE", 30*time.Second), "time in-flight jobs get to finish on SIGTERM [SHUTDOWN_GRACE]")
	flag.StringVar(&cfg.Credential, "credential", env("WORKER_CREDENTIAL", ""), "credential sent to the coordinator [WORKER_CREDENTIAL]")
	flag.BoolVar(&bcfg.Fallback, "fallback", envBool("WORKER_FALLBACK", true), "run unknown job names as 0.1-50 s of simulated work [WORKER_FALLBACK]")
	flag.DurationVar(&bcfg.FallbackMax, "fallback-max", envDuration("FALLBACK_MAX", 50*time.Second), "longest simulated work of the fallback [FALLBACK_MAX]")
	flag.StringVar(&bcfg.NetworkURL, "network-url", env("NETWORK_TASK_URL", builtin.DefaultNetworkURL), "URL network_task jobs GET [NETWORK_TASK_URL]")
	flag.DurationVar(&bcfg.CPUWork, "cpu-work", envDuration("CPU_WORK", time.Second), "CPU time of one cpu_intensive job [CPU_WORK]")
	webhookAllow := flag.String("webhook-allow", env("WEBHOOK_ALLOW", ""), "comma-separated CIDRs, addresses or host names that webhook jobs may reach although not public; default none [WEBHOOK_ALLOW]")
	flag.DurationVar(&bcfg.WebhookTimeout, "webhook-timeout", envDuration("WEBHOOK_TIMEOUT", builtin.DefaultWebhookTimeout), "time limit of one webhook request, redirects and body included [WEBHOOK_TIMEOUT]")
	flag.Parse()
	for _, a := range strings.Split(*webhookAllow, ",") {
		if a = strings.TrimSpace(a); a != "" {
			bcfg.WebhookAllow = append(bcfg.WebhookAllow, a)
		}
	}

	if err := bcfg.Validate(); err != nil {
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

	var ln net.Listener
	if *addr != "" {
		var err error
		if ln, err = net.Listen("tcp", *addr); err != nil {
			return fmt.Errorf("listen on %s: %w", *addr, err)
		}
	}
	var w *worker.Worker
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		w, err = worker.New(ctx, cfg, log)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		log.Warn("waiting for Redis", "err", err)
		time.Sleep(time.Second)
	}
	builtin.Register(w, bcfg)
	return w.Run(ctx, ln)
}
