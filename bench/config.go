package bench

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Scenario names, in the order Run runs them.
const (
	ScenarioDrain     = "drain"
	ScenarioSustained = "sustained"
	ScenarioLatency   = "latency"
	ScenarioRecovery  = "recovery"
)

// Scenarios lists every scenario in the order Run runs them.
var Scenarios = []string{ScenarioDrain, ScenarioSustained, ScenarioLatency, ScenarioRecovery}

// Config says what to measure and against which servers. The zero value of
// every size field means its default; call WithDefaults to see them.
type Config struct {
	// DatabaseURL points at a PostgreSQL server. Run creates a fresh
	// database bench_<unix time> on it and drops it at the end (unless
	// Keep). Required.
	DatabaseURL string
	// ExistingDatabase makes Run use DatabaseURL's database as it is (it
	// must hold no jobs) instead of creating and dropping one. Tests use it
	// with pgtest databases.
	ExistingDatabase bool
	// RedisURL points at a Redis server. Required.
	RedisURL string
	// RedisPrefix prefixes every Redis key of the bench cluster; the keys
	// under it are deleted at the end. Default "bench<unix time>:".
	RedisPrefix string
	// BinDir holds prebuilt submitter, coordinator and worker binaries.
	// Default: build them (without -race) into a temporary directory, which
	// needs the go command and the dts workspace as working directory.
	BinDir string
	// Keep keeps the database and the process logs after the run.
	Keep bool
	// ServiceEnv is extra NAME=VALUE environment for every service, for
	// experiments (CLAIM_BATCH=2000, POLL_INTERVAL=50ms, ...). Default none:
	// the services run with their defaults.
	ServiceEnv []string
	// SubmitterDBParams are extra query parameters of the submitter's
	// DATABASE_URL (pgxpool reads pool settings there: pool_max_conns=32).
	SubmitterDBParams string
	// ProfileDir, when set, gives every service and worker a loopback
	// PPROF_ADDR and writes a CPU profile of each over the sustained
	// window there (sustained-<process>.pprof), to see where a version
	// spends its time. Default none: no profiling, which costs CPU.
	ProfileDir string

	// PayloadBytes, when set, gives the jobs of the drain and sustained
	// scenarios a JSON string payload of this many bytes, its encoding
	// with the quotes (as the submitter's MAX_PAYLOAD_BYTES measures it);
	// the noop handler ignores it. At least 2 (""). Their batches shrink
	// below BatchSize where needed to fit the submitter's 16 MiB batch
	// body limit, and above 1 MiB the submitter runs with MAX_PAYLOAD_BYTES
	// raised to it. Default 0: no payload.
	PayloadBytes int
	// JobGroups, when set, makes the fleet mixed: the workers are split
	// into this many groups (worker k of a fleet in group k mod JobGroups),
	// group g's workers handle only the job name noop_g<g>, and the jobs
	// submitted are spread evenly over these names. The workers then run
	// in fleetworker processes even at one worker per process. Needs
	// Workers >= JobGroups, and no recovery scenario (its sleep jobs need
	// the built-in handlers). Default 0: every worker handles every
	// built-in job, and the jobs are noop.
	JobGroups int
	// LimitKeys, when set, sets up that many concurrency-limit keys before
	// the scenarios, each with a limit of one start a day and two jobs, the
	// first completed and the second waiting all run, so that the leader
	// also runs the limited claim in every round; the scenarios' jobs are
	// unlimited, and their counts leave the keys' jobs out. Default 0.
	LimitKeys int
	// LinkLatency, when set, puts distance between the components: a
	// toxiproxy server with one proxy in front of PostgreSQL and one in
	// front of Redis, each with a latency toxic of this on both
	// directions, and every service and worker reaches the stores only
	// through them, so each round trip to a store pays it twice. The
	// bench's own PostgreSQL reads go direct. Whole milliseconds (the
	// toxic's unit). Default 0: no proxy, loopback.
	LinkLatency time.Duration
	// LinkProxy puts the toxiproxy server of LinkLatency in place without
	// its latency toxics when LinkLatency is 0: the proxies' own cost (a
	// user-space copy of every byte, on the bench's machine) without the
	// distance, so that a LinkLatency run's loss can be split into the two.
	LinkProxy bool

	// Scenarios to run, a subset of Scenarios. Default all.
	Scenarios []string
	// Workers is the number of workers. Default 2.
	Workers int
	// WorkersPerProcess runs the workers that many to a process (the
	// fleetworker binary, each worker with its own id, connections and
	// heartbeats), for fleets larger than the machine runs as processes.
	// Default 1: each worker is a worker process. The recovery scenario
	// kills a whole process.
	WorkersPerProcess int
	// LeanFleet runs the workers in fleetworker processes in their lean
	// mode (FLEET_LEAN=1): the same protocol under the same ids, sharing
	// each process's Redis connections, every delivery completed at once
	// as a no-op. It measures the leader against a fleet larger than the
	// machine runs (a worker library per worker costs the machine more
	// than the leader it measures). Drain and sustained only.
	LeanFleet bool
	// Concurrency is each worker's WORKER_CONCURRENCY. Default 1000.
	Concurrency int
	// SubmitClients is the number of concurrent HTTP clients that post
	// batches (drain pre-submit, sustained load). Default 4.
	SubmitClients int
	// BatchSize is the number of jobs per POST /submit_jobs. Default 1000
	// (the API's maximum).
	BatchSize int

	// DrainJobs is the number of noop jobs pre-submitted and drained.
	// Default 200,000.
	DrainJobs int
	// DrainTimeout bounds the drain. Default 10 minutes.
	DrainTimeout time.Duration

	// SustainedDuration is the measured window of the sustained scenario.
	// Default 60 s.
	SustainedDuration time.Duration
	// SustainedWarmup is the load before the window opens. Default 5 s.
	SustainedWarmup time.Duration
	// SustainedRate caps the offered load of the sustained scenario, in
	// jobs per second over all clients; 0 (the default) means as fast as
	// the submitter answers.
	SustainedRate float64
	// SustainedBacklog bounds the unfinished jobs of the sustained scenario:
	// a client posts its next batch only while fewer than this many of the
	// jobs it and the others submitted are unfinished, so submission is
	// matched to the rate the cluster works them (as River's benchmark
	// keeps 75,000 jobs available). Default 75,000; negative: no bound,
	// the clients post as fast as they are answered (a flood).
	SustainedBacklog int
	// BacklogTimeout bounds the wait for the sustained scenario's backlog
	// to clear. Default 15 minutes.
	BacklogTimeout time.Duration

	// LatencyRates are the offered loads, in jobs per second, of the
	// latency scenario. Default 100 and 1000.
	LatencyRates []float64
	// NoHalfMax leaves out the extra latency run at half the maximum
	// sustained rate (which needs the sustained scenario).
	NoHalfMax bool
	// LatencyMaxRate caps every latency run's rate; 0 means no cap.
	LatencyMaxRate float64
	// LatencyDuration is the length of each latency run. Default 20 s.
	LatencyDuration time.Duration
	// LatencyConns bounds the single-job requests in flight. Default 256.
	LatencyConns int

	// RecoveryConcurrency is the concurrency of the two recovery workers,
	// and so the number of sleep jobs submitted. Default Concurrency.
	RecoveryConcurrency int
	// RecoverySleep is the sleep job's length. Default 5 s.
	RecoverySleep time.Duration

	// SampleInterval is the period of /proc sampling. Default 250 ms.
	SampleInterval time.Duration
	// PollInterval is the period of progress queries. Default 250 ms.
	PollInterval time.Duration
	// LogLevel is the services' LOG_LEVEL. Default "warn".
	LogLevel string
}

// Quick returns cfg shrunk to a smoke run of a few seconds per scenario.
func Quick(cfg Config) Config {
	cfg.Workers = 2
	cfg.Concurrency = 64
	cfg.DrainJobs = 300
	cfg.DrainTimeout = time.Minute
	cfg.SustainedDuration = 3 * time.Second
	cfg.SustainedWarmup = time.Second
	cfg.SustainedBacklog = 2000
	cfg.BacklogTimeout = time.Minute
	cfg.LatencyRates = []float64{50}
	cfg.LatencyMaxRate = 100
	cfg.LatencyDuration = 2 * time.Second
	cfg.RecoveryConcurrency = 4
	cfg.RecoverySleep = 2 * time.Second
	return cfg
}

// WithDefaults returns cfg with every unset field at its default.
func (c Config) WithDefaults() Config {
	now := time.Now().Unix()
	if c.RedisPrefix == "" {
		c.RedisPrefix = fmt.Sprintf("bench%d:", now)
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = slices.Clone(Scenarios)
	}
	setInt(&c.Workers, 2)
	setInt(&c.WorkersPerProcess, 1)
	setInt(&c.Concurrency, 1000)
	setInt(&c.SubmitClients, 4)
	setInt(&c.BatchSize, 1000)
	setInt(&c.DrainJobs, 200_000)
	setDur(&c.DrainTimeout, 10*time.Minute)
	setDur(&c.SustainedDuration, 60*time.Second)
	setDur(&c.SustainedWarmup, 5*time.Second)
	setInt(&c.SustainedBacklog, 75_000)
	setDur(&c.BacklogTimeout, 15*time.Minute)
	if len(c.LatencyRates) == 0 {
		c.LatencyRates = []float64{100, 1000}
	}
	setDur(&c.LatencyDuration, 20*time.Second)
	setInt(&c.LatencyConns, 256)
	setInt(&c.RecoveryConcurrency, c.Concurrency)
	setDur(&c.RecoverySleep, 5*time.Second)
	setDur(&c.SampleInterval, 250*time.Millisecond)
	setDur(&c.PollInterval, 250*time.Millisecond)
	if c.LogLevel == "" {
		c.LogLevel = "warn"
	}
	return c
}

func setInt(p *int, def int) {
	if *p == 0 {
		*p = def
	}
}

func setDur(p *time.Duration, def time.Duration) {
	if *p == 0 {
		*p = def
	}
}

// validate names the first bad field of a defaulted Config.
func (c Config) validate() error {
	switch {
	case c.DatabaseURL == "":
		return errors.New("DatabaseURL: required (a PostgreSQL server)")
	case c.RedisURL == "":
		return errors.New("RedisURL: required (a Redis server)")
	case c.Workers < 1:
		//lint:ignore ST1005 it starts with the name of the bad field, as all of validate's errors do
		return fmt.Errorf("Workers: %d, want at least 1", c.Workers)
	case c.WorkersPerProcess < 1:
		return fmt.Errorf("WorkersPerProcess: %d, want at least 1", c.WorkersPerProcess)
	case c.WorkersPerProcess > 1 && slices.Contains(c.Scenarios, ScenarioRecovery):
		return errors.New("WorkersPerProcess: the recovery scenario kills one worker process, so it needs one worker to a process")
	case c.LeanFleet && slices.ContainsFunc(c.Scenarios, func(s string) bool { return s != ScenarioDrain && s != ScenarioSustained }):
		return errors.New("LeanFleet: its workers complete every job at once, so it runs the drain and sustained scenarios only")
	case c.Concurrency < 1:
		//lint:ignore ST1005 it starts with the name of the bad field, as all of validate's errors do
		return fmt.Errorf("Concurrency: %d, want at least 1", c.Concurrency)
	case c.SubmitClients < 1:
		return fmt.Errorf("SubmitClients: %d, want at least 1", c.SubmitClients)
	case c.BatchSize < 1 || c.BatchSize > 1000:
		return fmt.Errorf("BatchSize: %d, want 1..1000", c.BatchSize)
	case c.DrainJobs < 1:
		return fmt.Errorf("DrainJobs: %d, want at least 1", c.DrainJobs)
	case c.LatencyConns < 1:
		return fmt.Errorf("LatencyConns: %d, want at least 1", c.LatencyConns)
	case c.RecoveryConcurrency < 1:
		return fmt.Errorf("RecoveryConcurrency: %d, want at least 1", c.RecoveryConcurrency)
	case c.SustainedDuration < 100*time.Millisecond:
		return fmt.Errorf("SustainedDuration: %v, want at least 100ms", c.SustainedDuration)
	case c.PayloadBytes == 1 || c.PayloadBytes < 0:
		return fmt.Errorf("PayloadBytes: %d, want 0 (none) or at least 2 (a JSON string)", c.PayloadBytes)
	case c.PayloadBytes > 0 && newJobShape(c).fitBatch(1) < 1:
		return fmt.Errorf("PayloadBytes: %d, too large for one job to fit the submitter's batch body limit (%d bytes)", c.PayloadBytes, maxBatchBody)
	case c.JobGroups < 0:
		return fmt.Errorf("JobGroups: %d, want 0 (a homogeneous fleet) or more", c.JobGroups)
	case c.JobGroups > c.Workers:
		return fmt.Errorf("JobGroups: %d, more than the %d workers: a group would have none", c.JobGroups, c.Workers)
	case c.JobGroups > 0 && slices.Contains(c.Scenarios, ScenarioRecovery):
		return errors.New("JobGroups: the recovery scenario's sleep jobs need workers with the built-in handlers; leave it out")
	case c.LimitKeys < 0:
		return fmt.Errorf("LimitKeys: %d, want 0 or more", c.LimitKeys)
	case c.LinkLatency < 0 || c.LinkLatency%time.Millisecond != 0:
		return fmt.Errorf("LinkLatency: %v, want 0 (loopback) or whole milliseconds", c.LinkLatency)
	}
	for _, r := range c.LatencyRates {
		if r <= 0 {
			return fmt.Errorf("LatencyRates: %v, want rates above 0", c.LatencyRates)
		}
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(Scenarios, s) {
			//lint:ignore ST1005 it starts with the name of the bad field, as all of validate's errors do
			return fmt.Errorf("Scenarios: unknown scenario %q (want some of %v)", s, Scenarios)
		}
	}
	return nil
}

func (c Config) runs(scenario string) bool { return slices.Contains(c.Scenarios, scenario) }
