// Command sdkworker is a user's worker written with the Go library, for the
// end-to-end tests: it handles only the job names in SDK_JOB_NAMES
// (comma-separated), each answering {"shout": PAYLOAD in upper case}, and
// serves /healthz and /metrics on WORKER_ADDR. WORKER_ID, REDIS_URL,
// WORKER_CONCURRENCY and HEARTBEAT_INTERVAL configure it as they do the
// worker binary. It runs until SIGTERM or SIGINT, then drains.
//
// With the OTEL_* variables of tracing set, each attempt's handler starts a
// span of its own (sdkworker.shout) from its context, as a user's handler
// would around its own calls, and a job whose payload holds
// "fail_first_attempt" fails its first attempt.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

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
	stopTracing, err := worker.SetupTracing(ctx, "sdkworker")
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = stopTracing(ctx)
	}()
	w, err := worker.New(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		return err
	}
	for _, name := range names {
		w.Handle(name, func(ctx context.Context, job *worker.Job) (any, error) {
			_, span := otel.Tracer("sdkworker").Start(ctx, "sdkworker.shout")
			defer span.End()
			if job.Attempt == 1 && strings.Contains(job.PayloadString(), "fail_first_attempt") {
				return nil, errors.New("the first attempt fails")
			}
			return map[string]string{"shout": strings.ToUpper(job.PayloadString())}, nil
		})
	}
	ln, err := net.Listen("tcp", os.Getenv("WORKER_ADDR"))
	if err != nil {
		return err
	}
	return w.Run(ctx, ln)
}
