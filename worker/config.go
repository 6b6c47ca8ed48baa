package worker

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// Config configures a Worker. Zero fields take the defaults in their comments.
type Config struct {
	// ID names the worker; it must be unique in the fleet. Default hostname-pid.
	ID string
	// RedisURL is the Redis URL (redis:// or rediss://). Required.
	RedisURL string
	// RedisPrefix namespaces every Redis key; it must match the coordinator's. Default "".
	RedisPrefix string
	// Concurrency is how many jobs run at once. Default 8.
	Concurrency int
	// HeartbeatInterval is how often the worker heartbeats; it must match
	// the coordinator's setting. Default 1s.
	HeartbeatInterval time.Duration
	// ShutdownGrace is how long in-flight jobs may finish after Run's
	// context ends before they are canceled and handed back. Default 30s.
	ShutdownGrace time.Duration
	// Credential is sent with every heartbeat for the coordinator to check. Default none.
	Credential string
}

func (c Config) withDefaults() Config {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.RedisURL == "":
		return errors.New("config: RedisURL is required")
	case len(c.ID) > 200:
		return errors.New("config: ID is longer than 200 characters")
	case c.Concurrency > 100_000:
		return errors.New("config: Concurrency is above 100000")
	}
	return nil
}
