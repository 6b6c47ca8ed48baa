// Package envconf reads the services' settings from environment variables,
// as the defaults of their command-line flags, and builds their loggers. It
// is the one place that decides how a variable is parsed: an empty variable
// counts as unset, and a value that does not parse is an error that stops
// the process at start-up rather than a silent fall back to the default.
package envconf

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/config"
)

// Defaults of the settings every binary shares. The services' Config types
// require these fields; only the mains fall back to a local server.
const (
	// DefaultDatabaseURL is DATABASE_URL's default: PostgreSQL on loopback.
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/dts?sslmode=disable"
	// DefaultRedisURL is REDIS_URL's default: Redis on loopback, database 0.
	DefaultRedisURL = "redis://127.0.0.1:6379/0"
)

// Env collects parse errors while settings are read; Err reports them.
type Env struct {
	errs []error
}

// String returns $name, or def when it is unset or empty.
func (e *Env) String(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Int returns $name as an integer, or def when it is unset or empty.
func (e *Env) Int(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: not an integer", name, v))
		return def
	}
	return n
}

// Float returns $name as a number, or def when it is unset or empty.
func (e *Env) Float(name string, def float64) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: not a number", name, v))
		return def
	}
	return f
}

// Bool returns $name as a boolean, or def when it is unset or empty.
func (e *Env) Bool(name string, def bool) bool {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want true or false", name, v))
		return def
	}
	return b
}

// Duration returns $name as a Go duration ("1s", "250ms"), or def when it
// is unset or empty.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: not a duration (like 1s or 250ms)", name, v))
		return def
	}
	return d
}

// HostPorts parses value, the setting of the variable name, as a
// comma-separated list of host:port addresses (REDIS_SENTINEL_ADDRS).
// Blanks around an address are dropped; an empty value is nil. An address
// that is not host:port with a port (1 to 65535) is an error that names the
// variable.
func HostPorts(name, value string) ([]string, error) {
	var addrs []string
	for _, a := range strings.Split(value, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if err := config.HostPort(a); err != nil {
			return nil, fmt.Errorf("%s=%q: %w", name, value, err)
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// Err returns every variable that did not parse, or nil.
func (e *Env) Err() error { return errors.Join(e.errs...) }

// NewLogger returns a slog logger at level ("debug", "info", "warn",
// "error"; empty means info) writing JSON to stderr, or text when stderr is a
// terminal.
func NewLogger(level string) (*slog.Logger, error) {
	var lvl slog.Level
	if level != "" {
		if err := lvl.UnmarshalText([]byte(level)); err != nil {
			return nil, fmt.Errorf("LOG_LEVEL=%q: want debug, info, warn or error", level)
		}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewJSONHandler(os.Stderr, opts)
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		h = slog.NewTextHandler(os.Stderr, opts)
	}
	return slog.New(h), nil
}

// ServiceGOGC is the garbage collector's target that the submitter,
// coordinator and worker binaries run with unless GOGC is set: a new
// collection starts when the heap has grown to 5 times what the last one
// left live, not 2 times. Under load they allocate per job and per request;
// with Go's default 100, garbage collection takes a large share of each
// one's CPU, and at 400 CPU per job falls by about a third for a peak RSS
// under twice as high (docs/benchmarks.md). GOGC (and GOMEMLIMIT) work as
// Go documents them.
const ServiceGOGC = 400

// SetGOGC sets the collector's target to percent unless GOGC is set in
// the environment; it returns the target in effect.
func SetGOGC(percent int) int {
	if os.Getenv("GOGC") != "" {
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p
	}
	debug.SetGCPercent(percent)
	return percent
}
