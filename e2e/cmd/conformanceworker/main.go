// Command conformanceworker is the Go SDK's conformance worker: the program
// the conformance suite (e2e/conformance_test.go, docs/conformance.md)
// runs as a black box. It handles exactly the conf.* job names of the
// contract, each in the way the suite expects, and is configured only by
// the environment: WORKER_ID and REDIS_URL (required), REDIS_PREFIX,
// WORKER_CONCURRENCY (4), HEARTBEAT_INTERVAL (1s), SHUTDOWN_GRACE (5s),
// WORKER_CREDENTIAL. Logs go to stderr; it exits 0 after a clean SIGTERM
// drain.
//
// CONFORMANCE_BREAK makes it a broken worker, for the suite's self-test
// only (TestConformanceCatchesBrokenWorker): "lie" reports every job
// completed without running its handler; "rerun" replaces the SDK with a
// naive loop (rerun.go) that keeps no lease tokens and ignores cancels.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/dtsched/dts/worker"
)

// Defaults of the contract, which differ from the worker package's.
const (
	defaultConcurrency   = 4
	defaultShutdownGrace = 5 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "conformanceworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := configFromEnv()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	handlers := conformanceHandlers()
	switch mode := os.Getenv("CONFORMANCE_BREAK"); mode {
	case "":
	case "lie":
		for name := range handlers {
			handlers[name] = func(context.Context, *worker.Job) (any, error) { return map[string]bool{"lie": true}, nil }
		}
	case "rerun":
		return runNaive(ctx, cfg, handlers, log)
	default:
		return fmt.Errorf("CONFORMANCE_BREAK: unknown mode %q", mode)
	}
	w, err := worker.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	for name, h := range handlers {
		w.Handle(name, h)
	}
	return w.Run(ctx, nil)
}

func configFromEnv() (worker.Config, error) {
	cfg := worker.Config{
		ID: os.Getenv("WORKER_ID"), RedisURL: os.Getenv("REDIS_URL"), RedisPrefix: os.Getenv("REDIS_PREFIX"),
		Credential:  os.Getenv("WORKER_CREDENTIAL"),
		Concurrency: defaultConcurrency, ShutdownGrace: defaultShutdownGrace,
	}
	if cfg.ID == "" {
		return cfg, errors.New("WORKER_ID is required")
	}
	if cfg.RedisURL == "" {
		return cfg, errors.New("REDIS_URL is required")
	}
	if v := os.Getenv("WORKER_CONCURRENCY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return cfg, fmt.Errorf("WORKER_CONCURRENCY %q: want a positive integer", v)
		}
		cfg.Concurrency = n
	}
	for name, d := range map[string]*time.Duration{"HEARTBEAT_INTERVAL": &cfg.HeartbeatInterval, "SHUTDOWN_GRACE": &cfg.ShutdownGrace} {
		if v := os.Getenv(name); v != "" {
			p, err := time.ParseDuration(v)
			if err != nil || p <= 0 {
				return cfg, fmt.Errorf("%s %q: want a positive duration such as 1s", name, v)
			}
			*d = p
		}
	}
	return cfg, nil
}

// conformanceHandlers are the contract's handlers, by job name.
func conformanceHandlers() map[string]worker.HandlerFunc {
	return map[string]worker.HandlerFunc{
		"conf.echo": func(_ context.Context, job *worker.Job) (any, error) {
			return job.Payload, nil
		},
		"conf.fail": func(_ context.Context, job *worker.Job) (any, error) {
			var p struct {
				SucceedOn *int `json:"succeed_on"`
			}
			_ = json.Unmarshal(job.Payload, &p)
			if p.SucceedOn == nil || job.Attempt < *p.SucceedOn {
				return nil, fmt.Errorf("failed on attempt %d", job.Attempt)
			}
			return map[string]int{"attempt": job.Attempt}, nil
		},
		"conf.permanent": func(context.Context, *worker.Job) (any, error) {
			return nil, worker.Permanent(errors.New("permanent failure"))
		},
		"conf.sleep": func(ctx context.Context, job *worker.Job) (any, error) {
			ms := intField(job, "ms", 0)
			if err := sleep(ctx, ms); err != nil {
				return nil, err
			}
			return map[string]int{"slept_ms": ms}, nil
		},
		"conf.stubborn": func(_ context.Context, job *worker.Job) (any, error) {
			ms := intField(job, "ms", 0)
			time.Sleep(time.Duration(ms) * time.Millisecond) // ignores cancellation on purpose
			return map[string]int{"slept_ms": ms}, nil
		},
		"conf.progress": func(ctx context.Context, job *worker.Job) (any, error) {
			if err := job.Progress(ctx, 50, "halfway"); err != nil {
				return nil, err
			}
			if err := sleep(ctx, intField(job, "ms", 1500)); err != nil {
				return nil, err
			}
			return map[string]bool{"done": true}, nil
		},
		"conf.log": func(_ context.Context, job *worker.Job) (any, error) {
			var p struct {
				Lines []string `json:"lines"`
			}
			_ = json.Unmarshal(job.Payload, &p)
			for i, l := range p.Lines {
				job.Logger().Info(l, "n", i+1)
			}
			return map[string]int{"logged": len(p.Lines)}, nil
		},
		"conf.large": func(_ context.Context, job *worker.Job) (any, error) {
			return map[string]string{"data": strings.Repeat("x", intField(job, "size", 0))}, nil
		},
		"conf.text": func(_ context.Context, job *worker.Job) (any, error) {
			var p struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(job.Payload, &p); err != nil {
				return nil, worker.Permanent(fmt.Errorf("payload: %w", err))
			}
			return map[string]any{"text": p.Text, "runes": utf8.RuneCountInString(p.Text)}, nil
		},
	}
}

// intField reads a number from the job's object payload, or def.
func intField(job *worker.Job, name string, def int) int {
	var p map[string]json.RawMessage
	if json.Unmarshal(job.Payload, &p) != nil || p[name] == nil {
		return def
	}
	var n int
	if json.Unmarshal(p[name], &n) != nil {
		return def
	}
	return n
}

// sleep waits ms milliseconds or until ctx ends, whose cause it returns.
func sleep(ctx context.Context, ms int) error {
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
