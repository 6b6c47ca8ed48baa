// Command submitter serves the scheduler's HTTP API (see package submitter
// and docs/api.md). Flags override environment variables, which override
// the defaults:
//
//	-addr              SUBMITTER_ADDR     127.0.0.1:8000
//	-database-url      DATABASE_URL       postgres://postgres@127.0.0.1:5432/dts?sslmode=disable
//	-redis-url         REDIS_URL          redis://127.0.0.1:6379/0
//	-redis-prefix      REDIS_PREFIX       ""
//	-max-payload-bytes MAX_PAYLOAD_BYTES  1048576
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
	"strconv"
	"syscall"
	"time"

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
	logger, err := newLogger(os.Getenv("LOG_LEVEL"))
	if err != nil {
		return err
	}
	cfg, err := parseConfig(args)
	if err != nil {
		return err
	}

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
// PostgreSQL or Redis are not reachable yet.
func connect(ctx context.Context, cfg submitter.Config, logger *slog.Logger) (*submitter.Server, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	delay := 250 * time.Millisecond
	for {
		attemptCtx, attemptCancel := context.WithTimeout(ctx, 5*time.Second)
		srv, err := submitter.New(attemptCtx, cfg, logger)
		attemptCancel()
		if err == nil {
			return srv, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("gave up connecting after %s: %w", connectTimeout, err)
		}
		logger.Warn("waiting for PostgreSQL and Redis", "error", err, "retry_in", delay.String())
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("gave up connecting after %s: %w", connectTimeout, err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 4*time.Second)
	}
}

func parseConfig(args []string) (submitter.Config, error) {
	fs := flag.NewFlagSet("submitter", flag.ContinueOnError)
	var cfg submitter.Config
	fs.StringVar(&cfg.Addr, "addr", env("SUBMITTER_ADDR", submitter.DefaultAddr), "listen address (SUBMITTER_ADDR)")
	fs.StringVar(&cfg.DatabaseURL, "database-url", env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/dts?sslmode=disable"),
		"PostgreSQL URL (DATABASE_URL)")
	fs.StringVar(&cfg.RedisURL, "redis-url", env("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL (REDIS_URL)")
	fs.StringVar(&cfg.RedisPrefix, "redis-prefix", env("REDIS_PREFIX", ""), "prefix of every Redis key (REDIS_PREFIX)")
	maxPayload := submitter.DefaultMaxPayloadBytes
	if v := os.Getenv("MAX_PAYLOAD_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return cfg, fmt.Errorf("MAX_PAYLOAD_BYTES=%q: not an integer", v)
		}
		maxPayload = n
	}
	fs.IntVar(&cfg.MaxPayloadBytes, "max-payload-bytes", maxPayload, "largest job payload in bytes (MAX_PAYLOAD_BYTES)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// A payload limit above the default body limit raises the body limit too.
	if limit := int64(cfg.MaxPayloadBytes) + 64<<10; limit > submitter.DefaultMaxBodyBytes {
		cfg.MaxBodyBytes = limit
	}
	return cfg, nil
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func newLogger(level string) (*slog.Logger, error) {
	var lvl slog.Level
	if level != "" {
		if err := lvl.UnmarshalText([]byte(level)); err != nil {
			return nil, fmt.Errorf("LOG_LEVEL=%q: want debug, info, warn or error", level)
		}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewJSONHandler(os.Stderr, opts)
	if isTerminal(os.Stderr) {
		h = slog.NewTextHandler(os.Stderr, opts)
	}
	return slog.New(h), nil
}

// isTerminal reports whether f is a character device (a terminal), without
// a dependency on x/term.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
