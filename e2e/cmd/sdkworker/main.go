// Command sdkworker is a user's worker written with the Go library, for the
// end-to-end tests: it handles only the job names in SDK_JOB_NAMES
// (comma-separated), each answering {"shout": PAYLOAD in upper case}, and
// serves /healthz and /metrics on WORKER_ADDR. WORKER_ID, REDIS_URL,
// WORKER_CONCURRENCY and HEARTBEAT_INTERVAL configure it as they do the
// worker binary. It runs until SIGTERM or SIGINT, then drains.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dtsched/dts/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "sdkworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg := worker.Config{ID: os.Getenv("WORKER_ID"), RedisURL: os.Getenv("REDIS_URL"), ShutdownGrace: 5 * time.Second}
	if v := os.Getenv("WORKER_CONCURRENCY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("WORKER_CONCURRENCY: %w", err)
		}
		cfg.Concurrency = n
	}
	if v := os.Getenv("HEARTBEAT_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("HEARTBEAT_INTERVAL: %w", err)
		}
		cfg.HeartbeatInterval = d
	}
	names := strings.Split(os.Getenv("SDK_JOB_NAMES"), ",")
	if len(names) == 0 || names[0] == "" {
		return fmt.Errorf("SDK_JOB_NAMES: no job name")
	}
	w, err := worker.New(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		return err
	}
	for _, name := range names {
		w.Handle(name, func(ctx context.Context, job *worker.Job) (any, error) {
			return map[string]string{"shout": strings.ToUpper(job.PayloadString())}, nil
		})
	}
	ln, err := net.Listen("tcp", os.Getenv("WORKER_ADDR"))
	if err != nil {
		return err
	}
	return w.Run(ctx, ln)
}
