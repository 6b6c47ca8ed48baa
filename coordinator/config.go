package coordinator

import (
	"fmt"
	"os"
	"time"

	"github.com/dtsched/dts/internal/job"
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

	// HeartbeatInterval is how often workers heartbeat. Default 1s.
	HeartbeatInterval time.Duration
	// HeartbeatMisses is how many intervals of silence make a worker
	// unavailable; its leases are then reclaimed at once. Default 3.
	HeartbeatMisses int
	// LeaseDuration is a lease's length; heartbeats extend it while the
	// worker reports the job running. Default 10s.
	LeaseDuration time.Duration
	// Backoff is the retry backoff. Default 1s base, 5m cap, 0.5 jitter.
	Backoff job.Backoff
	// PollInterval is the longest the dispatcher waits without a wake-up
	// before looking for due jobs (retries come due this way). Default 250ms.
	PollInterval time.Duration
	// ClaimBatch is the most jobs claimed in one statement. Default 1000.
	ClaimBatch int
	// ResultBatch is the most results applied in one transaction. Default 1000.
	ResultBatch int
	// ElectionInterval is how often a standby tries to become leader and a
	// leader renews its lease. Default 1s.
	ElectionInterval time.Duration
	// LeaderTTL is how long the leader lease lasts unless renewed: a
	// standby takes over within LeaderTTL + ElectionInterval of the
	// leader's last renewal. Default 3s; at least twice ElectionInterval.
	LeaderTTL time.Duration
	// RetentionCompleted is how long completed and canceled jobs are kept.
	// Default 24h.
	RetentionCompleted time.Duration
	// RetentionFailed is how long failed (dead) jobs are kept. Default 168h.
	RetentionFailed time.Duration
	// CleanupInterval is how often the retention cleaner runs. Default 1m.
	CleanupInterval time.Duration
	// DeadMirrorInterval is how often the Redis dead-letter list is checked
	// against PostgreSQL and rebuilt if they differ. Default 30s.
	DeadMirrorInterval time.Duration
	// ShutdownTimeout bounds the graceful HTTP shutdown. Default 10s.
	ShutdownTimeout time.Duration

	// Auth: tokens on /workers, worker credentials, the listen address
	// without auth (auth.go). Default: all off, loopback only.
	Auth AuthConfig
}

// WithDefaults returns c with zero fields set to their defaults.
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
	set(&c.HeartbeatInterval, time.Second)
	set(&c.LeaseDuration, 10*time.Second)
	set(&c.PollInterval, 250*time.Millisecond)
	set(&c.ElectionInterval, time.Second)
	set(&c.LeaderTTL, 3*c.ElectionInterval)
	set(&c.RetentionCompleted, 24*time.Hour)
	set(&c.RetentionFailed, 7*24*time.Hour)
	set(&c.CleanupInterval, time.Minute)
	set(&c.DeadMirrorInterval, 30*time.Second)
	set(&c.ShutdownTimeout, 10*time.Second)
	if c.HeartbeatMisses <= 0 {
		c.HeartbeatMisses = 3
	}
	if c.ClaimBatch <= 0 {
		c.ClaimBatch = 1000
	}
	if c.ResultBatch <= 0 {
		c.ResultBatch = 1000
	}
	c.Backoff = c.Backoff.WithDefaults()
	return c
}

func (c Config) validate() error {
	switch {
	case c.DatabaseURL == "":
		return fmt.Errorf("config: DatabaseURL is required")
	case c.RedisURL == "":
		return fmt.Errorf("config: RedisURL is required")
	case c.LeaseDuration < 2*c.HeartbeatInterval:
		return fmt.Errorf("config: LeaseDuration (%v) must be at least twice HeartbeatInterval (%v)", c.LeaseDuration, c.HeartbeatInterval)
	case c.LeaderTTL < 2*c.ElectionInterval:
		return fmt.Errorf("config: LeaderTTL (%v) must be at least twice ElectionInterval (%v)", c.LeaderTTL, c.ElectionInterval)
	case c.Backoff.Base > c.Backoff.Cap:
		return fmt.Errorf("config: Backoff.Base (%v) exceeds Backoff.Cap (%v)", c.Backoff.Base, c.Backoff.Cap)
	}
	return nil
}

// workerDeadline is how long a worker may stay silent before it is unavailable.
func (c Config) workerDeadline() time.Duration {
	return time.Duration(c.HeartbeatMisses) * c.HeartbeatInterval
}
