package coordinator

import (
	"fmt"
	"os"
	"time"

	"github.com/dtsched/dts/internal/config"
	"github.com/dtsched/dts/internal/job"
)

// Defaults of Config, which WithDefaults applies and cmd/coordinator's
// flags start from.
const (
	// DefaultAddr is the address cmd/coordinator listens on (Run takes a
	// listener).
	DefaultAddr = "127.0.0.1:9000"

	DefaultHeartbeatInterval  = time.Second
	DefaultHeartbeatMisses    = 3
	DefaultLeaseDuration      = 10 * time.Second
	DefaultPollInterval       = 250 * time.Millisecond
	DefaultClaimBatch         = 1000
	DefaultClaimBytes         = 16 << 20
	DefaultResultBatch        = 1000
	DefaultElectionInterval   = time.Second
	DefaultRetentionCompleted = 24 * time.Hour
	DefaultRetentionFailed    = 7 * 24 * time.Hour
	DefaultCleanupInterval    = time.Minute
	DefaultDeadMirrorInterval = 30 * time.Second
	DefaultShutdownTimeout    = 10 * time.Second
	DefaultScheduleGrace      = time.Minute
	// DefaultLeaderTTLIntervals is LeaderTTL's default in election
	// intervals: LeaderTTL defaults to this many times ElectionInterval.
	DefaultLeaderTTLIntervals = 3
)

// Config configures a coordinator. Zero fields take the defaults named in
// their comments (WithDefaults).
type Config struct {
	// ID names this coordinator in logs, /healthz and the leader record.
	// Default: hostname-pid.
	ID string
	// DatabaseURL is the PostgreSQL URL. Required.
	DatabaseURL string
	// RedisURL is the Redis URL (redis:// or rediss://). Required.
	RedisURL string
	// RedisPrefix namespaces every Redis key. Default "".
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

	// HeartbeatInterval is how often workers heartbeat. Default
	// DefaultHeartbeatInterval (1s).
	HeartbeatInterval time.Duration
	// HeartbeatMisses is how many intervals of silence make a worker
	// unavailable; its leases are then reclaimed at once. Default
	// DefaultHeartbeatMisses (3).
	HeartbeatMisses int
	// LeaseDuration is a lease's length; heartbeats extend it while the
	// worker reports the job running. Default DefaultLeaseDuration (10s);
	// at least twice HeartbeatInterval.
	LeaseDuration time.Duration
	// Backoff is the retry backoff. Base and Cap default to
	// job.DefaultBackoff's (1s, 5m); Base at most Cap. Jitter is taken as
	// given (0: none); outside 0..1 it is job.DefaultBackoff's (0.5), as is
	// the default of cmd/coordinator's -backoff-jitter.
	Backoff job.Backoff
	// PollInterval is the longest the dispatcher waits without a wake-up
	// before looking for due jobs (retries come due this way). Default
	// DefaultPollInterval (250ms).
	PollInterval time.Duration
	// ClaimBatch is the most jobs claimed in one statement. Default
	// DefaultClaimBatch (1000).
	ClaimBatch int
	// ClaimBytes is about the most payload bytes one claim leases: a group
	// is offered at most ClaimBytes divided by the bytes per job of its
	// last claim (at least one slot). Default DefaultClaimBytes (16 MiB).
	ClaimBytes int
	// ResultBatch is the most results applied in one transaction. Default
	// DefaultResultBatch (1000).
	ResultBatch int
	// ElectionInterval is how often a standby tries to become leader and a
	// leader renews its lease. Default DefaultElectionInterval (1s).
	ElectionInterval time.Duration
	// LeaderTTL is how long the leader lease lasts unless renewed: a
	// standby takes over within LeaderTTL + ElectionInterval of the
	// leader's last renewal. Default DefaultLeaderTTLIntervals (3) times
	// ElectionInterval; at least twice ElectionInterval.
	LeaderTTL time.Duration
	// RetentionCompleted is how long completed and canceled jobs are kept.
	// Default DefaultRetentionCompleted (24h).
	RetentionCompleted time.Duration
	// RetentionFailed is how long failed (dead) jobs are kept. Default
	// DefaultRetentionFailed (168h).
	RetentionFailed time.Duration
	// CleanupInterval is how often the retention cleaner runs. Default
	// DefaultCleanupInterval (1m).
	CleanupInterval time.Duration
	// DeadMirrorInterval is how often the Redis dead-letter list is checked
	// against PostgreSQL and rebuilt if they differ. Default
	// DefaultDeadMirrorInterval (30s).
	DeadMirrorInterval time.Duration
	// ScheduleGrace is how late a tick of a periodic job may be enqueued:
	// a tick later than that was missed, and the schedule's catch-up
	// policy decides. Default DefaultScheduleGrace (1m); at least
	// LeaderTTL + ElectionInterval, so that a change of leader misses no
	// tick.
	ScheduleGrace time.Duration
	// ShutdownTimeout bounds the graceful HTTP shutdown. Default
	// DefaultShutdownTimeout (10s).
	ShutdownTimeout time.Duration

	// Auth: tokens on /workers, worker credentials, the listen address
	// without auth (auth.go). Default: all off, loopback only.
	Auth AuthConfig
}

// WithDefaults returns c with zero (or negative) fields set to their
// defaults.
func (c Config) WithDefaults() Config {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	set(&c.LeaseDuration, DefaultLeaseDuration)
	set(&c.PollInterval, DefaultPollInterval)
	set(&c.ElectionInterval, DefaultElectionInterval)
	set(&c.LeaderTTL, DefaultLeaderTTLIntervals*c.ElectionInterval)
	set(&c.RetentionCompleted, DefaultRetentionCompleted)
	set(&c.RetentionFailed, DefaultRetentionFailed)
	set(&c.CleanupInterval, DefaultCleanupInterval)
	set(&c.DeadMirrorInterval, DefaultDeadMirrorInterval)
	set(&c.ShutdownTimeout, DefaultShutdownTimeout)
	set(&c.ScheduleGrace, DefaultScheduleGrace)
	if c.HeartbeatMisses <= 0 {
		c.HeartbeatMisses = DefaultHeartbeatMisses
	}
	if c.ClaimBatch <= 0 {
		c.ClaimBatch = DefaultClaimBatch
	}
	if c.ClaimBytes <= 0 {
		c.ClaimBytes = DefaultClaimBytes
	}
	if c.ResultBatch <= 0 {
		c.ResultBatch = DefaultResultBatch
	}
	c.Backoff = c.Backoff.WithDefaults()
	return c
}

// validate checks a config that WithDefaults has filled in, and names
// every bad field.
func (c Config) validate() error {
	var check config.Check
	if c.DatabaseURL == "" {
		check.Bad("DatabaseURL", "is required")
	}
	if c.RedisURL == "" {
		check.Bad("RedisURL", "is required")
	}
	check.RedisSentinel(c.RedisSentinelAddrs, c.RedisSentinelMaster)
	if c.LeaseDuration < 2*c.HeartbeatInterval {
		check.Bad("LeaseDuration", "(%v) must be at least twice HeartbeatInterval (%v)", c.LeaseDuration, c.HeartbeatInterval)
	}
	if c.LeaderTTL < 2*c.ElectionInterval {
		check.Bad("LeaderTTL", "(%v) must be at least twice ElectionInterval (%v)", c.LeaderTTL, c.ElectionInterval)
	}
	if c.ScheduleGrace < c.LeaderTTL+c.ElectionInterval {
		check.Bad("ScheduleGrace", "(%v) must be at least LeaderTTL + ElectionInterval (%v), or a change of leader misses ticks",
			c.ScheduleGrace, c.LeaderTTL+c.ElectionInterval)
	}
	if c.Backoff.Base > c.Backoff.Cap {
		check.Bad("Backoff.Base", "(%v) exceeds Backoff.Cap (%v)", c.Backoff.Base, c.Backoff.Cap)
	}
	return check.Err()
}

// workerDeadline is how long a worker may stay silent before it is unavailable.
func (c Config) workerDeadline() time.Duration {
	return time.Duration(c.HeartbeatMisses) * c.HeartbeatInterval
}
