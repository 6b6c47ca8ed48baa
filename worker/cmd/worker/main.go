// Command worker runs a dts worker with the built-in handlers (see package
// builtin). Flags and environment variables are listed in docs/operations.md.
package main

import (
	"context"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dtsched/dts/internal/envconf"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/otelx"
	"github.com/dtsched/dts/internal/retry"
	"github.com/dtsched/dts/worker"
	"github.com/dtsched/dts/worker/builtin"
)

// connectTimeout is how long start-up waits for Redis, which may still be
// starting next to us.
const connectTimeout = 30 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	envconf.SetGOGC(envconf.ServiceGOGC)
	var e envconf.Env
	var cfg worker.Config
	var bcfg builtin.Config
	defAddr := worker.DefaultAddr
	if v, ok := os.LookupEnv("WORKER_ADDR"); ok {
		defAddr = v // empty turns the HTTP listener off
	}
	addr := flag.String("addr", defAddr, "HTTP listen address for healthz and metrics; empty: none [WORKER_ADDR]")
	flag.StringVar(&cfg.ID, "id", e.String("WORKER_ID", ""), "worker id, unique in the fleet; default hostname-pid [WORKER_ID]")
	flag.StringVar(&cfg.RedisURL, "redis-url", e.String("REDIS_URL", envconf.DefaultRedisURL), "Redis URL [REDIS_URL]")
	flag.StringVar(&cfg.RedisPrefix, "redis-prefix", e.String("REDIS_PREFIX", ""), "prefix of every Redis key [REDIS_PREFIX]")
	sentinelAddrs := flag.String("redis-sentinel-addrs", e.String("REDIS_SENTINEL_ADDRS", ""), "Redis Sentinel addresses, host:port,...; empty: no Sentinel, the host of -redis-url is the server [REDIS_SENTINEL_ADDRS]")
	flag.StringVar(&cfg.RedisSentinelMaster, "redis-sentinel-master", e.String("REDIS_SENTINEL_MASTER", ""), "name of the Redis master the sentinels monitor [REDIS_SENTINEL_MASTER]")
	flag.IntVar(&cfg.Concurrency, "concurrency", e.Int("WORKER_CONCURRENCY", worker.DefaultConcurrency), "jobs run at once [WORKER_CONCURRENCY]")
	flag.IntVar(&cfg.Prefetch, "prefetch", e.Int("WORKER_PREFETCH", worker.DefaultPrefetch), "jobs held leased beyond -concurrency, each waiting for a free slot [WORKER_PREFETCH]")
	flag.IntVar(&cfg.PrefetchMax, "prefetch-max", e.Int("WORKER_PREFETCH_MAX", worker.DefaultPrefetchMax), "most jobs held beyond -concurrency while jobs finish fast (about 250 ms of them); at or below -prefetch: fixed at -prefetch [WORKER_PREFETCH_MAX]")
	flag.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", e.Duration("HEARTBEAT_INTERVAL", worker.DefaultHeartbeatInterval), "heartbeat interval; match the coordinator's [HEARTBEAT_INTERVAL]")
	flag.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", e.Duration("SHUTDOWN_GRACE", worker.DefaultShutdownGrace), "time in-flight jobs get to finish on SIGTERM [SHUTDOWN_GRACE]")
	queues := flag.String("queues", e.String("WORKER_QUEUES", ""), "queues served, with weights, e.g. critical:6,default:3,low:1; empty: every queue [WORKER_QUEUES]")
	flag.StringVar(&cfg.Credential, "credential", e.String("WORKER_CREDENTIAL", ""), "credential sent to the coordinator [WORKER_CREDENTIAL]")
	flag.BoolVar(&bcfg.Fallback, "fallback", e.Bool("WORKER_FALLBACK", builtin.DefaultFallback), fmt.Sprintf("run the names default and test_job as %v to -fallback-max of simulated work [WORKER_FALLBACK]", builtin.DefaultFallbackMin))
	flag.DurationVar(&bcfg.FallbackMax, "fallback-max", e.Duration("FALLBACK_MAX", builtin.DefaultFallbackMax), "longest simulated work of the fallback [FALLBACK_MAX]")
	flag.StringVar(&bcfg.NetworkURL, "network-url", e.String("NETWORK_TASK_URL", builtin.DefaultNetworkURL), "URL network_task jobs GET [NETWORK_TASK_URL]")
	flag.DurationVar(&bcfg.CPUWork, "cpu-work", e.Duration("CPU_WORK", builtin.DefaultCPUWork), "CPU time of one cpu_intensive job [CPU_WORK]")
	webhookAllow := flag.String("webhook-allow", e.String("WEBHOOK_ALLOW", ""), "comma-separated CIDRs, addresses or host names that webhook jobs may reach although not public; default none [WEBHOOK_ALLOW]")
	flag.DurationVar(&bcfg.WebhookTimeout, "webhook-timeout", e.Duration("WEBHOOK_TIMEOUT", builtin.DefaultWebhookTimeout), "time limit of one webhook request, redirects and body included [WEBHOOK_TIMEOUT]")
	flag.StringVar(&bcfg.SMTPHost, "smtp-host", e.String("SMTP_HOST", ""), "SMTP server of email jobs; empty: email is not registered [SMTP_HOST]")
	flag.IntVar(&bcfg.SMTPPort, "smtp-port", e.Int("SMTP_PORT", 0), "SMTP port; 0: 25, 587 or 465 by -smtp-tls [SMTP_PORT]")
	flag.StringVar(&bcfg.SMTPTLS, "smtp-tls", e.String("SMTP_TLS", builtin.DefaultSMTPTLS), "none, starttls or implicit [SMTP_TLS]")
	flag.StringVar(&bcfg.SMTPUsername, "smtp-username", e.String("SMTP_USERNAME", ""), "SMTP AUTH user; empty: no AUTH [SMTP_USERNAME]")
	flag.StringVar(&bcfg.SMTPFrom, "smtp-from", e.String("SMTP_FROM", ""), "sender of email jobs, e.g. 'Shop <noreply@shop.example>' [SMTP_FROM]")
	smtpCA := flag.String("smtp-ca-file", e.String("SMTP_CA_FILE", ""), "PEM file of CAs the SMTP server's certificate is verified with; empty: the system's [SMTP_CA_FILE]")
	flag.DurationVar(&bcfg.SMTPTimeout, "smtp-timeout", e.Duration("SMTP_TIMEOUT", builtin.DefaultSMTPTimeout), "time limit of the SMTP connection and of each command [SMTP_TIMEOUT]")
	flag.Parse()
	if err := e.Err(); err != nil {
		return err
	}
	var err error
	if cfg.Queues, err = worker.ParseQueues(*queues); err != nil {
		return fmt.Errorf("WORKER_QUEUES: %w", err)
	}
	if cfg.RedisSentinelAddrs, err = envconf.HostPorts("REDIS_SENTINEL_ADDRS", *sentinelAddrs); err != nil {
		return err
	}
	// Passwords only from the environment, never a flag (ps shows those).
	cfg.RedisSentinelPassword = os.Getenv("REDIS_SENTINEL_PASSWORD")
	bcfg.SMTPPassword = os.Getenv("SMTP_PASSWORD")
	if *smtpCA != "" {
		pem, err := os.ReadFile(*smtpCA)
		if err != nil {
			return fmt.Errorf("SMTP_CA_FILE: %w", err)
		}
		bcfg.SMTPRootCAs = x509.NewCertPool()
		if !bcfg.SMTPRootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("SMTP_CA_FILE %s: no PEM certificate in it", *smtpCA)
		}
	}
	for _, a := range strings.Split(*webhookAllow, ",") {
		if a = strings.TrimSpace(a); a != "" {
			bcfg.WebhookAllow = append(bcfg.WebhookAllow, a)
		}
	}

	if err := bcfg.Validate(); err != nil {
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
	stopTracing, err := otelx.SetupProcess(ctx, "dts-worker", os.Getenv)
	if err != nil {
		return err
	}
	defer stopTracing()

	var ln net.Listener
	if *addr != "" {
		var err error
		if ln, err = net.Listen("tcp", *addr); err != nil {
			return fmt.Errorf("listen on %s: %w", *addr, err)
		}
	}
	w, err := retry.Connect(ctx, log, "Redis", connectTimeout, func(ctx context.Context) (*worker.Worker, error) {
		return worker.New(ctx, cfg, log)
	})
	if err != nil {
		return err
	}
	builtin.Register(w, bcfg)
	if bcfg.SMTPHost == "" {
		log.InfoContext(ctx, "email jobs are not handled here: SMTP_HOST is not set")
	}
	return w.Run(ctx, ln)
}
