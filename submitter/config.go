package submitter

import (
	"errors"
	"fmt"
	"time"
)

// Config configures a submitter. The zero value of every field means its
// default; New applies WithDefaults and then checks the result.
type Config struct {
	// Addr is the address cmd/submitter listens on. Default 127.0.0.1:8000.
	// (Run takes a listener; Addr is only carried for main.)
	Addr string
	// DatabaseURL is the PostgreSQL connection string. Required.
	DatabaseURL string
	// RedisURL is the Redis URL (redis:// or rediss://). Required.
	RedisURL string
	// RedisPrefix namespaces every Redis key. Default "" (none).
	RedisPrefix string
	// MaxBodyBytes limits a request body, except on POST /submit_jobs.
	// Default 2 MiB.
	MaxBodyBytes int64
	// MaxBatchBodyBytes limits the body of POST /submit_jobs. Default 16 MiB.
	MaxBatchBodyBytes int64
	// MaxPayloadBytes limits one job's payload, compact JSON with numbers
	// written out in full. Default 1 MiB; at most MaxBodyBytes.
	MaxPayloadBytes int
	// ReadHeaderTimeout bounds reading a request's headers. Default 5s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request. Default 30s.
	ReadTimeout time.Duration
	// WriteTimeout bounds handling a request and writing its answer. Default 30s.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Default 120s.
	IdleTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown once Run's context is
	// canceled; requests still running then are cut off. Default 10s.
	ShutdownTimeout time.Duration
}

// Defaults.
const (
	DefaultAddr              = "127.0.0.1:8000"
	DefaultMaxBodyBytes      = 2 << 20
	DefaultMaxBatchBodyBytes = 16 << 20
	DefaultMaxPayloadBytes   = 1 << 20
)

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxBatchBodyBytes == 0 {
		c.MaxBatchBodyBytes = DefaultMaxBatchBodyBytes
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	def(&c.ReadHeaderTimeout, 5*time.Second)
	def(&c.ReadTimeout, 30*time.Second)
	def(&c.WriteTimeout, 30*time.Second)
	def(&c.IdleTimeout, 120*time.Second)
	def(&c.ShutdownTimeout, 10*time.Second)
	return c
}

// validate checks a config that WithDefaults has filled in.
func (c Config) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.DatabaseURL == "" {
		bad("DatabaseURL", "required")
	}
	if c.RedisURL == "" {
		bad("RedisURL", "required")
	}
	if c.MaxBodyBytes < 1 {
		bad("MaxBodyBytes", "must be positive, got %d", c.MaxBodyBytes)
	}
	if c.MaxBatchBodyBytes < 1 {
		bad("MaxBatchBodyBytes", "must be positive, got %d", c.MaxBatchBodyBytes)
	}
	if c.MaxPayloadBytes < 4 || int64(c.MaxPayloadBytes) > c.MaxBodyBytes {
		bad("MaxPayloadBytes", "must be between 4 and MaxBodyBytes (%d), got %d", c.MaxBodyBytes, c.MaxPayloadBytes)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"ReadHeaderTimeout", c.ReadHeaderTimeout}, {"ReadTimeout", c.ReadTimeout}, {"WriteTimeout", c.WriteTimeout},
		{"IdleTimeout", c.IdleTimeout}, {"ShutdownTimeout", c.ShutdownTimeout},
	} {
		if d.d < 0 {
			bad(d.name, "must not be negative, got %s", d.d)
		}
	}
	return errors.Join(errs...)
}
