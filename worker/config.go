package worker

import (
	"fmt"
	"os"
	"time"

	"github.com/dtsched/dts/internal/config"
	"github.com/dtsched/dts/internal/wire"
)

// Defaults of Config, which WithDefaults applies and cmd/worker's flags
// start from.
const (
	// DefaultAddr is the address cmd/worker serves /healthz and /metrics on
	// (Run takes a listener).
	DefaultAddr = "127.0.0.1:7001"

	DefaultConcurrency = 8
	// DefaultPrefetch is cmd/worker's WORKER_PREFETCH default; a Config
	// built in code prefetches nothing unless it sets Prefetch.
	DefaultPrefetch = 32
	// DefaultPrefetchMax is cmd/worker's WORKER_PREFETCH_MAX default; a
	// Config built in code keeps Prefetch fixed unless it sets PrefetchMax.
	DefaultPrefetchMax       = 1024
	DefaultHeartbeatInterval = time.Second
	DefaultShutdownGrace     = 30 * time.Second
)

// Limits validate enforces.
const (
	maxIDLen       = 200
	maxConcurrency = 100_000
	maxPrefetch    = 100_000
)

// Config configures a Worker. Zero fields take the defaults named in their
// comments (WithDefaults).
type Config struct {
	// ID names the worker; it must be unique in the fleet, at most 200
	// characters. Default hostname-pid.
	ID string
	// RedisURL is the Redis URL (redis:// or rediss://). Required.
	RedisURL string
	// RedisPrefix namespaces every Redis key; it must match the
	// coordinator's. Default "".
	RedisPrefix string
	// RedisSentinelAddrs are Redis Sentinel's addresses, host:port each.
	// When set, Redis is the master the sentinels name RedisSentinelMaster,
	// wherever a failover has moved it, and RedisURL gives only its
	// password, database and options. Default nil: no Sentinel, RedisURL's
	// host is the server.
	RedisSentinelAddrs []string
	// RedisSentinelMaster is the master's name in the sentinels'
	// configuration (sentinel monitor NAME ...); required with
	// RedisSentinelAddrs. Default "".
	RedisSentinelMaster string
	// RedisSentinelPassword is the sentinels' own password (their
	// requirepass), if they have one. Default "" (none).
	RedisSentinelPassword string
	// Concurrency is how many jobs run at once, at most 100000. Default
	// DefaultConcurrency (8).
	Concurrency int
	// Prefetch is how many jobs beyond Concurrency the worker holds leased,
	// waiting for a slot, so that a slot that frees starts its next job at
	// once instead of after a round trip through the leader. The leader
	// fills every worker's free slots before it prefetches to any, so a
	// prefetched job waits only while every slot of its kind is busy.
	// Prefetched jobs' leases are extended like running ones, and they are
	// handed back at shutdown without running. At most 100000. Default 0
	// (none); cmd/worker uses DefaultPrefetch (32), which more than
	// doubles the no-op jobs a small fleet runs a second
	// (docs/benchmarks.md). Keep it 0 for jobs that run for minutes: a
	// prefetched job waits behind them while a worker that joins later
	// stays idle.
	Prefetch int
	// PrefetchMax, when above Prefetch, lets the prefetch follow the
	// jobs: at each heartbeat the worker holds about prefetch.Window
	// (250 ms) of its own completions of the last interval, never fewer
	// than Prefetch nor more than PrefetchMax, and says so in the
	// heartbeat. Jobs that take seconds keep it at Prefetch; no-op jobs
	// raise it until a slot that frees finds its next job here, however
	// far away the leader is. It grows between heartbeats too: every
	// prefetch.Sample (62.5 ms) the worker counts its completions, and when
	// they ask for twice the prefetch or more, or for PrefetchMax, it
	// heartbeats at once to say so. At most 100000.
	// Default 0 (fixed at Prefetch); cmd/worker uses DefaultPrefetchMax
	// (1024).
	PrefetchMax int
	// HeartbeatInterval is how often the worker heartbeats; it must match
	// the coordinator's setting. Default DefaultHeartbeatInterval (1s).
	HeartbeatInterval time.Duration
	// ShutdownGrace is how long in-flight jobs may finish after Run's
	// context ends before they are canceled and handed back. Default
	// DefaultShutdownGrace (30s).
	ShutdownGrace time.Duration
	// Credential is sent with every heartbeat for the coordinator to check.
	// Default none.
	Credential string
	// Queues are the queues this worker serves, with weights: when all
	// have due jobs, each gets a share of the worker's slots in proportion
	// to its weight (0: only slots the others leave). Priority orders jobs
	// within a queue. ParseQueues reads the WORKER_QUEUES form
	// ("critical:6,default:3,low:1"). Default nil: every queue, by priority
	// alone, as before queues had weights.
	Queues []QueueWeight
}

// QueueWeight is one queue a worker serves and its weight, 0 to 1000.
type QueueWeight = wire.QueueWeight

// ParseQueues parses a WORKER_QUEUES list: comma-separated name[:weight]
// entries, weight 0 to 1000 (1 when left out; the weight is what follows
// the last ':', since a queue name may hold ':'). Empty: nil, every queue.
func ParseQueues(s string) ([]QueueWeight, error) { return wire.ParseQueueWeights(s) }

// WithDefaults returns c with zero (or negative) fields set to their
// defaults.
func (c Config) WithDefaults() Config {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	return c
}

// validate checks a config that WithDefaults has filled in, and names
// every bad field.
func (c Config) validate() error {
	var check config.Check
	if c.RedisURL == "" {
		check.Bad("RedisURL", "is required")
	}
	check.RedisSentinel(c.RedisSentinelAddrs, c.RedisSentinelMaster)
	if len(c.ID) > maxIDLen {
		check.Bad("ID", "is longer than %d characters", maxIDLen)
	}
	if c.Prefetch < 0 || c.Prefetch > maxPrefetch {
		check.Bad("Prefetch", "(%d) is not within 0..%d", c.Prefetch, maxPrefetch)
	}
	if c.PrefetchMax < 0 || c.PrefetchMax > maxPrefetch {
		check.Bad("PrefetchMax", "(%d) is not within 0..%d", c.PrefetchMax, maxPrefetch)
	}
	if c.Concurrency > maxConcurrency {
		check.Bad("Concurrency", "(%d) is above %d", c.Concurrency, maxConcurrency)
	}
	if c.Queues != nil {
		if _, err := wire.ParseQueueWeights(wire.FormatQueueWeights(c.Queues)); err != nil {
			check.Bad("Queues", "%v", err)
		} else if len(c.Queues) == 0 {
			check.Bad("Queues", "is empty; nil serves every queue")
		}
	}
	return check.Err()
}
