// Command fleetworker runs FLEET_SIZE dts workers in one process, each
// with its own id (WORKER_ID-0, WORKER_ID-1, ...), its own Redis
// connections, heartbeats and slots, and the built-in handlers. The bench
// uses it to measure the leader against fleets larger than the machine
// runs as processes (bench -workers-per-process); every worker in it
// speaks the protocol exactly as a worker process does.
//
// GET /metrics on WORKER_ADDR answers the workers' counters summed over
// the workers of the process, series by series (the bench's sustained
// scenario counts completions by them).
//
// FLEET_LEAN=1 runs the lean fleet instead (lean.go): the same protocol
// under the same ids, sharing the process's connections, every delivery
// completed at once, so that the fleet costs the machine little beside
// the leader it measures.
//
// FLEET_JOB_NAMES, when set, replaces the built-in handlers with the
// built-in noop handler under the names it lists, comma-separated: one
// name for every worker, or one per worker (FLEET_SIZE of them), worker i
// handling only the i-th. The bench's mixed fleets (bench -job-groups)
// use it.
//
// Its other settings are the worker binary's: REDIS_URL, REDIS_PREFIX,
// WORKER_CONCURRENCY, WORKER_PREFETCH, HEARTBEAT_INTERVAL, LOG_LEVEL, and
// WORKER_ADDR, where it answers GET /healthz once every worker is made.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dtsched/dts/internal/envconf"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/worker"
	"github.com/dtsched/dts/worker/builtin"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleetworker:", err)
		os.Exit(1)
	}
}

func run() error {
	var e envconf.Env
	size := e.Int("FLEET_SIZE", 1)
	id := e.String("WORKER_ID", "fleet")
	addr := e.String("WORKER_ADDR", "")
	pprofAddr := e.String("PPROF_ADDR", "")
	jobNames := e.String("FLEET_JOB_NAMES", "")
	lean := e.Bool("FLEET_LEAN", false)
	cfg := worker.Config{
		RedisURL:          e.String("REDIS_URL", envconf.DefaultRedisURL),
		RedisPrefix:       e.String("REDIS_PREFIX", ""),
		Concurrency:       e.Int("WORKER_CONCURRENCY", worker.DefaultConcurrency),
		Prefetch:          e.Int("WORKER_PREFETCH", worker.DefaultPrefetch),
		PrefetchMax:       e.Int("WORKER_PREFETCH_MAX", worker.DefaultPrefetchMax),
		HeartbeatInterval: e.Duration("HEARTBEAT_INTERVAL", worker.DefaultHeartbeatInterval),
		ShutdownGrace:     e.Duration("SHUTDOWN_GRACE", worker.DefaultShutdownGrace),
	}
	if err := e.Err(); err != nil {
		return err
	}
	if size < 1 {
		return fmt.Errorf("FLEET_SIZE %d: want at least 1", size)
	}
	var names []string
	if jobNames != "" {
		names = strings.Split(jobNames, ",")
		if len(names) != 1 && len(names) != size {
			return fmt.Errorf("FLEET_JOB_NAMES: %d names, want 1 or FLEET_SIZE (%d)", len(names), size)
		}
	}
	builtins := handlers{}
	builtin.Register(builtins, builtin.Config{}.WithDefaults())
	log, err := envconf.NewLogger(os.Getenv("LOG_LEVEL"))
	if err != nil {
		return err
	}
	if pprofAddr != "" {
		if err := httpx.ServePprof(pprofAddr, log); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if lean {
		ids := make([]string, size)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%d", id, i)
		}
		return runLean(ctx, ids, leanJobTypes(size, names, builtins), cfg, addr, log)
	}

	workers := make([]*worker.Worker, size)
	for i := range workers {
		c := cfg
		c.ID = fmt.Sprintf("%s-%d", id, i)
		w, err := worker.New(ctx, c, log)
		if err != nil {
			return fmt.Errorf("worker %s: %w", c.ID, err)
		}
		if names == nil {
			for name, h := range builtins {
				w.Handle(name, h)
			}
		} else {
			w.Handle(names[i%len(names)], builtins[builtin.NameNoop])
		}
		workers[i] = w
	}
	stopHTTP, err := serveHTTP(addr, func(w http.ResponseWriter, _ *http.Request) { writeSummed(w, workers) })
	if err != nil {
		return err
	}
	defer stopHTTP()
	var wg sync.WaitGroup
	errs := make([]error, size)
	for i, w := range workers {
		wg.Go(func() { errs[i] = w.Run(ctx, nil) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// serveHTTP answers GET /healthz and GET /metrics (with metrics) on addr
// until the returned stop is called; with addr empty it serves nothing.
func serveHTTP(addr string, metrics http.HandlerFunc) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /metrics", metrics)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// handlers collects the built-in handlers by name.
type handlers map[string]worker.HandlerFunc

func (h handlers) Handle(name string, f worker.HandlerFunc) { h[name] = f }

// writeSummed writes each counter series of the workers' metrics (the
// lines of the _total families) summed over the workers.
func writeSummed(out http.ResponseWriter, workers []*worker.Worker) {
	sums := map[string]float64{}
	var order []string
	for _, w := range workers {
		rec := httptest.NewRecorder()
		w.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		for _, line := range strings.Split(rec.Body.String(), "\n") {
			series, value, ok := strings.Cut(line, " ")
			if !ok || strings.HasPrefix(line, "#") || !strings.Contains(series, "_total") {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				continue
			}
			if _, seen := sums[series]; !seen {
				order = append(order, series)
			}
			sums[series] += v
		}
	}
	out.Header().Set("Content-Type", "text/plain; version=0.0.4")
	for _, series := range order {
		fmt.Fprintf(out, "%s %g\n", series, sums[series])
	}
}
