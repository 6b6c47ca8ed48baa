package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Report is everything one Run measured. Durations are in seconds and
// rates in jobs per second unless a field's name says otherwise.
type Report struct {
	StartedAt time.Time    `json:"started_at"`
	Seconds   float64      `json:"seconds"`
	Command   string       `json:"command,omitempty"`
	Machine   Machine      `json:"machine"`
	Postgres  PostgresInfo `json:"postgres"`
	Redis     RedisInfo    `json:"redis"`
	Settings  Settings     `json:"settings"`

	Drain     *DrainResult     `json:"drain,omitempty"`
	Sustained *SustainedResult `json:"sustained,omitempty"`
	Latency   []LatencyRun     `json:"latency,omitempty"`
	Recovery  *RecoveryResult  `json:"recovery,omitempty"`

	// Limits is the LimitKeys set-up before the scenarios, Groups the
	// scenarios' completed jobs by group of a mixed fleet (JobGroups).
	Limits *LimitSetup   `json:"limit_setup,omitempty"`
	Groups []GroupResult `json:"groups,omitempty"`
	// Link is the distance a LinkLatency run put between the services and
	// the stores, as measured through the proxies.
	Link *LinkResult `json:"link,omitempty"`

	// Targets compares the figures with the goals of the performance issue.
	Targets []Target `json:"targets"`
	// Error is why the run stopped early, if it did.
	Error string `json:"error,omitempty"`
}

// Machine describes the host the whole cluster ran on.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	MemoryMB  int64  `json:"memory_mb"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	// LoadAvg and LoadAvgEnd are /proc/loadavg's 1, 5 and 15 minute
	// averages at the start and the end of the run.
	LoadAvg    string `json:"load_average_start"`
	LoadAvgEnd string `json:"load_average_end"`
}

// PostgresInfo is the server and the settings that decide what a commit
// costs.
type PostgresInfo struct {
	Version           string `json:"version"`
	Fsync             string `json:"fsync"`
	SynchronousCommit string `json:"synchronous_commit"`
	FullPageWrites    string `json:"full_page_writes"`
	SharedBuffers     string `json:"shared_buffers"`
	MaxConnections    int    `json:"max_connections"`
	Database          string `json:"database"`
}

// RedisInfo is the Redis server and its persistence.
type RedisInfo struct {
	Version     string `json:"version"`
	AOF         bool   `json:"aof_enabled"`
	AppendFsync string `json:"appendfsync,omitempty"`
	PID         int    `json:"-"`
}

// Settings is the shape of the cluster under test.
type Settings struct {
	Scenarios []string `json:"scenarios"`
	Workers   int      `json:"workers"`
	// WorkersPerProcess is above 1 when the workers ran in fleetworker
	// processes.
	WorkersPerProcess int `json:"workers_per_process,omitempty"`
	Concurrency       int `json:"concurrency"`
	SubmitClients     int `json:"submit_clients"`
	BatchSize         int `json:"batch_size"`
	// The services run with their default heartbeat interval (1 s), misses
	// (3), lease (10 s), claim batch (1000) and poll interval (250 ms).
	ServiceDefaults string `json:"service_defaults"`
	// ServiceEnv and SubmitterDBParams are experiments' overrides of those
	// defaults; empty in a standard run.
	ServiceEnv        []string `json:"service_env,omitempty"`
	SubmitterDBParams string   `json:"submitter_db_params,omitempty"`
	// Profiled: the sustained window's figures include the cost of CPU
	// profiling every process (Config.ProfileDir).
	Profiled bool `json:"profiled,omitempty"`
	// PayloadBytes, JobGroups and LimitKeys are the experiment's shape
	// (Config); 0 in a standard run. SubmitterEnv is what a payload above
	// the submitter's limit set in its environment.
	PayloadBytes int `json:"payload_bytes,omitempty"`
	JobGroups    int `json:"job_groups,omitempty"`
	// LeanFleet: the workers were lean simulated ones (Config.LeanFleet).
	LeanFleet    bool     `json:"lean_fleet,omitempty"`
	LimitKeys    int      `json:"limit_keys,omitempty"`
	SubmitterEnv []string `json:"submitter_env,omitempty"`
	// LinkLatencyMS is the latency each way between every service or
	// worker and the stores (Config.LinkLatency); 0 in a standard run.
	LinkLatencyMS float64 `json:"link_latency_ms,omitempty"`
	// LinkProxy: the services reached the stores through the proxies
	// (Config.LinkProxy, or a LinkLatency above 0).
	LinkProxy bool `json:"link_proxy,omitempty"`
}

// Target is one goal of the performance issue next to what was measured.
type Target struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Goal     string  `json:"goal"`
	Met      bool    `json:"met"`
}

// Run starts a cluster, runs cfg's scenarios in order and stops everything
// it started. It returns what it measured even when a scenario fails.
// Progress goes to log; Run prints nothing.
func Run(ctx context.Context, cfg Config, log *slog.Logger) (*Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("bench config: %w", err)
	}
	cfg.BatchSize = newJobShape(cfg).fitBatch(cfg.BatchSize)
	rep := &Report{StartedAt: time.Now(), Machine: describeMachine(), Settings: Settings{
		Scenarios: cfg.Scenarios, Workers: cfg.Workers, WorkersPerProcess: cfg.WorkersPerProcess, Concurrency: cfg.Concurrency,
		SubmitClients: cfg.SubmitClients, BatchSize: cfg.BatchSize,
		ServiceDefaults: "heartbeat 1s x 3 misses, lease 10s, claim batch 1000, poll 250ms, LOG_LEVEL=" + cfg.LogLevel,
		ServiceEnv:      cfg.ServiceEnv, SubmitterDBParams: cfg.SubmitterDBParams, Profiled: cfg.ProfileDir != "",
		PayloadBytes: cfg.PayloadBytes, JobGroups: cfg.JobGroups, LeanFleet: cfg.LeanFleet, LimitKeys: cfg.LimitKeys,
		LinkLatencyMS: float64(cfg.LinkLatency.Milliseconds()), LinkProxy: cfg.LinkLatency > 0 || cfg.LinkProxy,
	}}
	if cfg.PayloadBytes > defaultMaxPayload {
		rep.Settings.SubmitterEnv = []string{submitterPayloadEnv(cfg.PayloadBytes)}
	}
	defer func() {
		rep.Seconds = time.Since(rep.StartedAt).Seconds()
		rep.Machine.LoadAvgEnd = loadAvg()
	}()
	c, err := startCluster(ctx, cfg, log)
	if err != nil {
		rep.Error = err.Error()
		return rep, err
	}
	defer c.close()
	if rep.Postgres, err = c.pg.serverInfo(ctx); err != nil {
		log.Warn("could not describe PostgreSQL", "err", err)
	}
	if rep.Redis, err = describeRedis(ctx, cfg.RedisURL); err != nil {
		log.Warn("could not describe Redis", "err", err)
	}
	c.redisPID = rep.Redis.PID
	if c.link != nil {
		lr, err := c.link.measure(ctx)
		if err != nil {
			rep.Error = err.Error()
			return rep, err
		}
		rep.Link = &lr
	}
	err = runScenarios(ctx, c, rep)
	if e := shapeResults(ctx, c, rep); e != nil && err == nil {
		err = e
	}
	rep.Targets = targets(rep)
	if err != nil {
		rep.Error = err.Error()
		if !errors.Is(err, context.Canceled) {
			log.Error("scenario failed; service logs follow", "err", err)
			fmt.Fprint(os.Stderr, c.logTails(15))
		}
	}
	return rep, err
}

func runScenarios(ctx context.Context, c *cluster, rep *Report) error {
	cfg, log := c.cfg, c.log
	var err error
	if cfg.LimitKeys > 0 {
		if rep.Limits, err = setupLimits(ctx, c); err != nil {
			return fmt.Errorf("limit keys: %w", err)
		}
	}
	if cfg.runs(ScenarioDrain) {
		log.Info("drain: pre-submitting noop jobs with no worker running", "jobs", cfg.DrainJobs)
		if rep.Drain, err = runDrain(ctx, c); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
	}
	if cfg.runs(ScenarioSustained) {
		log.Info("sustained: submitting and working noop jobs", "seconds", cfg.SustainedDuration.Seconds())
		if rep.Sustained, err = runSustained(ctx, c); err != nil {
			return fmt.Errorf("sustained: %w", err)
		}
	}
	if cfg.runs(ScenarioLatency) {
		if rep.Latency, err = runLatency(ctx, c, latencyTargets(cfg, rep.Sustained)); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	if cfg.runs(ScenarioRecovery) {
		log.Info("recovery: killing a worker that holds sleep jobs")
		if rep.Recovery, err = runRecovery(ctx, c); err != nil {
			return fmt.Errorf("recovery: %w", err)
		}
	}
	return nil
}

// shapeResults reads, after the scenarios, what the experiment's shape
// promised: every group served by its own workers, and the limit keys'
// jobs still waiting.
func shapeResults(ctx context.Context, c *cluster, rep *Report) error {
	if ctx.Err() != nil {
		return nil
	}
	if c.cfg.JobGroups > 0 {
		g, err := groupResults(ctx, c)
		if err != nil {
			return err
		}
		rep.Groups = g
	}
	if l := rep.Limits; l != nil && c.pg.setup.lastID > 0 {
		st, err := c.pg.statusCountsUpTo(ctx, c.pg.setup.lastID)
		if err != nil {
			return err
		}
		l.WaitingEnd = st["pending"]
		if l.WaitingEnd != int64(l.Keys) {
			return fmt.Errorf("limit keys: %d of the %d waiting limited jobs still wait at the end (by status: %v)", l.WaitingEnd, l.Keys, st)
		}
	}
	return nil
}

// targets compares the report with the performance issue's goals.
func targets(rep *Report) []Target {
	var out []Target
	if d := rep.Drain; d != nil {
		out = append(out, Target{ScenarioDrain, "drain rate (jobs/s)", d.Rate, ">= 25000", d.Rate >= 25000})
		if d.Jobs >= 1_000_000 {
			rss := peakRSS(d.Resources, "coordinator")
			out = append(out, Target{ScenarioDrain, "coordinator peak RSS (MB) draining 1M+ jobs", rss, "< 200", rss > 0 && rss < 200})
		}
	}
	if s := rep.Sustained; s != nil {
		out = append(out, Target{ScenarioSustained, "completed rate (jobs/s)", s.CompletedRate, ">= 20000", s.CompletedRate >= 20000})
		if s.BacklogEnd >= 1_000_000 {
			rss := peakRSS(s.BacklogResources, "coordinator")
			out = append(out, Target{ScenarioSustained, fmt.Sprintf("coordinator peak RSS (MB) draining a %s backlog", num(float64(s.BacklogEnd))),
				rss, "< 200", rss > 0 && rss < 200})
			if d := rep.Drain; d != nil && d.Rate > 0 {
				share := 100 * s.BacklogClearRate / d.Rate
				out = append(out, Target{ScenarioSustained, "backlog drain rate as % of the drain scenario's rate", share, ">= 80", share >= 80})
			}
		}
	}
	for _, r := range rep.Latency {
		if r.TargetRate == 1000 {
			out = append(out, Target{ScenarioLatency, "p99 submit->start at 1000/s (ms)", r.SubmitToStart.P99, "<= 10", r.SubmitToStart.P99 <= 10})
		}
	}
	if len(rep.Groups) > 0 {
		served := 0
		for _, g := range rep.Groups {
			if g.Completed > 0 && g.ByOthers == 0 {
				served++
			}
		}
		out = append(out, Target{"groups", "groups whose jobs completed, only on their own workers", float64(served),
			fmt.Sprintf("= %d", len(rep.Groups)), served == len(rep.Groups)})
	}
	if r := rep.Recovery; r != nil {
		out = append(out, Target{ScenarioRecovery, "max kill->re-leased (s)", r.Relet.Max / 1000, "< 5", r.Relet.N > 0 && r.Relet.Max < 5000})
	}
	return out
}

func peakRSS(u Usage, name string) float64 {
	for _, p := range u.Procs {
		if p.Name == name {
			return p.PeakRSSMB
		}
	}
	return 0
}

func describeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.MemoryMB = kb / 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.LoadAvg = loadAvg()
	return m
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// describeRedis reads the server's version and persistence, and its pid
// when the server runs on this machine.
func describeRedis(ctx context.Context, redisURL string) (RedisInfo, error) {
	var in RedisInfo
	rc, err := dialRedis(ctx, redisURL)
	if err != nil {
		return in, err
	}
	defer rc.close()
	server, err := rc.info("server")
	if err != nil {
		return in, err
	}
	in.Version = server["redis_version"]
	if pid, err := strconv.Atoi(server["process_id"]); err == nil && isProcess(pid, "redis") {
		in.PID = pid
	}
	if p, err := rc.info("persistence"); err == nil {
		in.AOF = p["aof_enabled"] == "1"
	}
	if v, err := rc.do("CONFIG", "GET", "appendfsync"); err == nil {
		if kv, ok := v.([]any); ok && len(kv) == 2 {
			in.AppendFsync, _ = kv[1].(string)
		}
	}
	return in, nil
}

// isProcess reports whether pid is a local process whose command name
// starts with name.
func isProcess(pid int, name string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), name)
}
