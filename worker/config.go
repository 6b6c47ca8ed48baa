package worker

import (
	"fmt"
	"os"
	"time"

	"github.com/dtsched/dts/internal/config"
)

// Defaults of Config, which WithDefaults applies and cmd/worker's flags
// start from.
const (
	// DefaultAddr is the address cmd/worker serves /healthz and /metrics on
	// (Run takes a listener).
	DefaultAddr = "127.0.0.1:7001"

	DefaultConcurrency       = 8
	DefaultPrefetch          = 0
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
	// Concurrency is how many jobs run at once, at most 100000. Default
	// DefaultConcurrency (8).
	Concurrency int
	// Prefetch is how many jobs beyond Concurrency the worker holds leased,
	// waiting for a slot, so that a slot that frees starts its next job at
	// once instead of after a round trip through the leader. The leader
	// fills every worker's free slots before it prefetches to any, so a
	// prefetched job waits only while every slot of its kind is busy.
	// Prefetched jobs' leases are extended like running ones, and they are
	// handed back at shutdown without running. At most 100000. Default
	// DefaultPrefetch (0).
	Prefetch int
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
}

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
	if len(c.ID) > maxIDLen {
		check.Bad("ID", "is longer than %d characters", maxIDLen)
	}
	if c.Prefetch < 0 || c.Prefetch > maxPrefetch {
		check.Bad("Prefetch", "(%d) is not within 0..%d", c.Prefetch, maxPrefetch)
	}
	if c.Concurrency > maxConcurrency {
		check.Bad("Concurrency", "(%d) is above %d", c.Concurrency, maxConcurrency)
	}
	return check.Err()
}
