// Command bench load-tests a dts cluster that it starts itself and prints
// the figures as tables (and as JSON with -json FILE). It needs PostgreSQL
// and Redis servers: DATABASE_URL and REDIS_URL (or -database-url and
// -redis-url). `make bench` provides them. See docs/benchmarks.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/dtsched/dts/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	// -quick changes the defaults of the size flags; flags given explicitly
	// still win. So look for it before the flags are defined.
	quickRun := slices.ContainsFunc(os.Args[1:], func(a string) bool {
		return a == "-quick" || a == "--quick" || a == "-quick=true" || a == "--quick=true"
	})
	def, defRates := bench.Config{}, "100,1000"
	if quickRun {
		def, defRates = bench.Quick(def), "50"
	}
	def = def.WithDefaults()

	cfg := def
	flag.Bool("quick", false, "tiny smoke run: a few seconds per scenario (changes the size defaults)")
	jsonOut := flag.String("json", "", "also write the report as JSON to `FILE`")
	scenarios := flag.String("scenarios", strings.Join(bench.Scenarios, ","), "comma-separated scenarios to run")
	rates := flag.String("latency-rates", defRates, "offered loads of the latency scenario, jobs/s, comma-separated")
	verbose := flag.Bool("v", false, "debug logging")
	runs := flag.Int("runs", 1, "run everything this many times, each on a fresh database and fresh services, then print the medians")
	flag.StringVar(&cfg.DatabaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL server; the bench creates and drops a database bench_<unix time> on it [DATABASE_URL]")
	flag.StringVar(&cfg.RedisURL, "redis-url", os.Getenv("REDIS_URL"), "Redis server [REDIS_URL]")
	flag.StringVar(&cfg.RedisPrefix, "redis-prefix", def.RedisPrefix, "prefix of the bench cluster's Redis keys, deleted at the end")
	flag.StringVar(&cfg.BinDir, "bin-dir", "", "use the submitter, coordinator and worker binaries in this directory instead of building them")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the bench database and the service logs")
	flag.IntVar(&cfg.Workers, "workers", def.Workers, "workers")
	flag.IntVar(&cfg.WorkersPerProcess, "workers-per-process", def.WorkersPerProcess, "workers run to a process (a fleetworker process above 1: fleets larger than the machine runs as processes)")
	flag.IntVar(&cfg.Concurrency, "concurrency", def.Concurrency, "slots per worker (WORKER_CONCURRENCY)")
	flag.IntVar(&cfg.SubmitClients, "submit-clients", def.SubmitClients, "concurrent HTTP clients posting batches")
	flag.IntVar(&cfg.BatchSize, "batch", def.BatchSize, "jobs per POST /submit_jobs (at most 1000)")
	flag.IntVar(&cfg.DrainJobs, "drain-jobs", def.DrainJobs, "jobs pre-submitted and drained")
	flag.DurationVar(&cfg.DrainTimeout, "drain-timeout", def.DrainTimeout, "give up the drain after this long")
	flag.DurationVar(&cfg.SustainedDuration, "sustained", def.SustainedDuration, "measured window of the sustained scenario")
	flag.DurationVar(&cfg.SustainedWarmup, "warmup", def.SustainedWarmup, "load before the sustained window opens")
	flag.Float64Var(&cfg.SustainedRate, "sustained-rate", def.SustainedRate, "cap on the sustained scenario's offered load, jobs/s (0: as fast as accepted)")
	flag.IntVar(&cfg.SustainedBacklog, "sustained-backlog", def.SustainedBacklog, "post batches only while fewer jobs than this are unfinished (-1: no bound, a flood)")
	flag.DurationVar(&cfg.BacklogTimeout, "backlog-timeout", def.BacklogTimeout, "give up waiting for the sustained backlog to clear after this long")
	flag.DurationVar(&cfg.LatencyDuration, "latency-duration", def.LatencyDuration, "length of each latency run")
	flag.Float64Var(&cfg.LatencyMaxRate, "latency-max-rate", def.LatencyMaxRate, "cap on every latency run's rate, jobs/s (0: none)")
	flag.BoolVar(&cfg.NoHalfMax, "no-half-max", false, "skip the latency run at half the sustained maximum")
	flag.IntVar(&cfg.LatencyConns, "latency-conns", def.LatencyConns, "most single-job requests in flight")
	flag.IntVar(&cfg.RecoveryConcurrency, "recovery-concurrency", 0, "slots of each recovery worker = sleep jobs submitted (default -concurrency)")
	flag.DurationVar(&cfg.RecoverySleep, "recovery-sleep", def.RecoverySleep, "length of the recovery scenario's sleep jobs")
	flag.StringVar(&cfg.LogLevel, "service-log-level", def.LogLevel, "LOG_LEVEL of the services")
	flag.Func("service-env", "extra `NAME=VALUE` for every service, e.g. CLAIM_BATCH=2000 (repeatable; experiments only)", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("want NAME=VALUE, got %q", v)
		}
		cfg.ServiceEnv = append(cfg.ServiceEnv, v)
		return nil
	})
	flag.StringVar(&cfg.ProfileDir, "profile", "", "write a CPU profile of every service and worker over the sustained window into `DIR` (sustained-<process>.pprof; go tool pprof reads them)")
	flag.IntVar(&cfg.PayloadBytes, "payload-bytes", 0, "drain and sustained jobs carry a JSON string payload of `N` bytes, quotes included (batches shrink to fit the 16 MiB batch body limit; experiments only)")
	flag.BoolVar(&cfg.LeanFleet, "lean-fleet", false, "run the workers as lean simulated workers in fleetworker processes (-workers-per-process to a process): the protocol under many ids, every job completed at once; drain and sustained only")
	flag.IntVar(&cfg.JobGroups, "job-groups", 0, "a mixed fleet of `G` groups: group g's workers handle only noop_g<g>, the jobs spread over the names (experiments only)")
	flag.IntVar(&cfg.LimitKeys, "limit-keys", 0, "before the scenarios, `K` concurrency-limit keys each get a limited job left waiting (experiments only)")
	flag.DurationVar(&cfg.LinkLatency, "link-latency", 0, "put toxiproxy between every service and worker and PostgreSQL and Redis, with this `latency` (whole ms) each way, as between hosts (experiments only)")
	flag.BoolVar(&cfg.LinkProxy, "link-proxy", false, "with -link-latency 0, put the same toxiproxy in place without latency: the proxies' own cost, to compare with a -link-latency run (experiments only)")
	flag.StringVar(&cfg.SubmitterDBParams, "submitter-db-params", "", "extra query parameters of the submitter's DATABASE_URL, e.g. pool_max_conns=32 (experiments only)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", flag.Args())
	}
	if cfg.RecoveryConcurrency == 0 {
		cfg.RecoveryConcurrency = cfg.Concurrency
		if quickRun {
			cfg.RecoveryConcurrency = def.RecoveryConcurrency
		}
	}
	cfg.LatencyRates = nil
	cfg.Scenarios = splitList(*scenarios)
	for _, s := range splitList(*rates) {
		r, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("-latency-rates: %q is not a number", s)
		}
		cfg.LatencyRates = append(cfg.LatencyRates, r)
	}
	if *runs < 1 {
		return fmt.Errorf("-runs: want at least 1, got %d", *runs)
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return fmt.Errorf("-profile: %w", err)
		}
	}
	if cfg.DatabaseURL == "" || cfg.RedisURL == "" {
		return fmt.Errorf("need a PostgreSQL and a Redis server: set DATABASE_URL and REDIS_URL (or run `make bench`, which starts local ones)")
	}

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	command := strings.Join(os.Args, " ")
	var reports []*bench.Report
	var err error
	for i := range *runs {
		if *runs > 1 {
			log.Info("starting run", "run", i+1, "of", *runs)
		}
		var rep *bench.Report
		rep, err = bench.Run(ctx, cfg, log)
		if rep == nil {
			break
		}
		rep.Command = command
		reports = append(reports, rep)
		if e := rep.WriteTable(os.Stdout); e != nil && err == nil {
			err = e
		}
		if err != nil || ctx.Err() != nil {
			break // a failed run stops the series: its figures would skew the medians
		}
		fmt.Println()
	}
	var out any
	if len(reports) == 1 && *runs == 1 {
		out = reports[0]
	} else if len(reports) > 0 {
		sum := bench.Summarize(reports)
		if e := sum.WriteTable(os.Stdout); e != nil && err == nil {
			err = e
		}
		out = struct {
			Runs    []*bench.Report `json:"runs"`
			Summary bench.Summary   `json:"summary"`
		}{reports, sum}
	}
	if *jsonOut != "" && out != nil {
		b, e := json.MarshalIndent(out, "", "  ")
		if e == nil {
			e = os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
		}
		if e != nil && err == nil {
			err = fmt.Errorf("write -json: %w", e)
		}
	}
	return err
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
