package submitter

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/config"
)

// Config configures a submitter. The zero value of every field means its
// default; New applies WithDefaults and then checks the result.
type Config struct {
	// Addr is the address cmd/submitter listens on. Default DefaultAddr
	// (127.0.0.1:8000).
	// (Run takes a listener; Addr is only carried for main.)
	Addr string
	// DatabaseURL is the PostgreSQL connection string. Required.
	DatabaseURL string
	// RedisURL is the Redis URL (redis:// or rediss://). Required.
	RedisURL string
	// RedisPrefix namespaces every Redis key. Default "" (none).
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
	// MaxBodyBytes limits a request body, except on POST /submit_jobs.
	// Default DefaultMaxBodyBytes (2 MiB).
	MaxBodyBytes int64
	// MaxBatchBodyBytes limits the body of POST /submit_jobs. Default
	// DefaultMaxBatchBodyBytes (16 MiB).
	MaxBatchBodyBytes int64
	// MaxPayloadBytes limits one job's payload, compact JSON with numbers
	// written out in full. Default DefaultMaxPayloadBytes (1 MiB); at least
	// 4 and at most MaxBodyBytes.
	MaxPayloadBytes int
	// ReadHeaderTimeout bounds reading a request's headers. Default
	// DefaultReadHeaderTimeout (5s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request. Default
	// DefaultReadTimeout (30s).
	ReadTimeout time.Duration
	// WriteTimeout bounds handling a request and writing its answer.
	// Default DefaultWriteTimeout (30s).
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Default
	// DefaultIdleTimeout (120s).
	IdleTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown once Run's context is
	// canceled; requests still running then are cut off. Default
	// DefaultShutdownTimeout (10s).
	ShutdownTimeout time.Duration

	// Auth says which bearer tokens the API accepts: JWTs (HS256 secret,
	// RS256 or EdDSA public key, optional issuer and audience) and API
	// keys from PostgreSQL. Default: none, auth is off and every caller
	// may do anything, which is allowed on a loopback address only.
	Auth auth.Config
	// InsecureNoAuth allows a non-loopback address without auth (something
	// else must guard the port). Default false: New and Run refuse.
	InsecureNoAuth bool
	// RateLimitRPS is the sustained request rate of each caller: each token,
	// or each client IP when auth is off. Default DefaultRateLimitRPS
	// (1000); negative: no limit.
	RateLimitRPS float64
	// RateLimitBurst is how many requests a caller may send at once above
	// its rate. Default DefaultRateLimitBurst (2000).
	RateLimitBurst int
	// MaxConcurrentRequests caps API requests in progress; more are
	// answered 503 overloaded at once. Default DefaultMaxConcurrentRequests
	// (512); negative: no cap.
	MaxConcurrentRequests int
	// MaxInflightBodyBytes bounds the bytes of the API request bodies in
	// progress at once: a body that does not fit beside the others is
	// answered 503 overloaded before it is read. It bounds the memory large
	// batches take (a request holds a few copies of its body while it is
	// decoded and inserted). Default DefaultMaxInflightBodyBytes (256 MiB);
	// negative: no bound.
	MaxInflightBodyBytes int64
	// MaxBacklog bounds the due jobs waiting for a worker: while at least
	// this many wait, submissions are answered 503 backlog_full with
	// Retry-After, so that clients faster than the workers cannot take the
	// database from them. Approximate: counted every BacklogCheckInterval,
	// plus the due jobs this submitter accepted since the last count.
	// Default DefaultMaxBacklog (0): no bound (the queue absorbs any
	// burst).
	MaxBacklog int64
	// BacklogCheckInterval is how often the backlog is counted when
	// MaxBacklog is set. Default DefaultBacklogCheckInterval (1s).
	BacklogCheckInterval time.Duration
	// RejectUnknownJobNames answers a submission 400 unknown_job_name when
	// no worker the coordinator records (in any state, until retention
	// forgets it) handles a job's name, instead of storing a job that would
	// wait for a worker that may never come. Default
	// DefaultRejectUnknownJobNames (false): such jobs are accepted and show
	// in GET /stats unknown_names.
	RejectUnknownJobNames bool
	// UIBasePath is where the operations console (package ui) is served:
	// a path of one or more segments, without a trailing slash, whose
	// first segment is none of the API's. Its links are relative, so a
	// proxy may serve it under another prefix. Default DefaultUIBasePath
	// (/ui).
	UIBasePath string
	// GrafanaURL is the base URL of a Grafana that serves the dashboard of
	// deploy/grafana: the console's charts link to its panels. Default
	// DefaultGrafanaURL (""): no links.
	GrafanaURL string
	// TraceURL is the link of a trace in a trace viewer, "{trace_id}"
	// standing for the trace's id (Jaeger:
	// http://jaeger:16686/trace/{trace_id}): the console's Job page links
	// a traced job to its trace. Default DefaultTraceURL (""): the trace
	// id is shown without a link.
	TraceURL string
}

// Defaults of Config, which WithDefaults applies and cmd/submitter's flags
// start from.
const (
	DefaultAddr              = "127.0.0.1:8000"
	DefaultMaxBodyBytes      = 2 << 20
	DefaultMaxBatchBodyBytes = 16 << 20
	DefaultMaxPayloadBytes   = 1 << 20

	DefaultReadHeaderTimeout    = 5 * time.Second
	DefaultReadTimeout          = 30 * time.Second
	DefaultWriteTimeout         = 30 * time.Second
	DefaultIdleTimeout          = 120 * time.Second
	DefaultShutdownTimeout      = 10 * time.Second
	DefaultBacklogCheckInterval = time.Second

	DefaultRateLimitRPS          = 1000
	DefaultRateLimitBurst        = 2000
	DefaultMaxConcurrentRequests = 512
	DefaultMaxInflightBodyBytes  = 256 << 20
	DefaultMaxBacklog            = 0
	DefaultRejectUnknownJobNames = false
	DefaultUIBasePath            = "/ui"
	DefaultGrafanaURL            = ""
	DefaultTraceURL              = ""
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
	def(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&c.ReadTimeout, DefaultReadTimeout)
	def(&c.WriteTimeout, DefaultWriteTimeout)
	def(&c.IdleTimeout, DefaultIdleTimeout)
	def(&c.ShutdownTimeout, DefaultShutdownTimeout)
	def(&c.BacklogCheckInterval, DefaultBacklogCheckInterval)
	if c.UIBasePath == "" {
		c.UIBasePath = DefaultUIBasePath
	}
	if c.RateLimitRPS == 0 {
		c.RateLimitRPS = DefaultRateLimitRPS
	}
	if c.RateLimitBurst == 0 {
		c.RateLimitBurst = DefaultRateLimitBurst
	}
	if c.MaxConcurrentRequests == 0 {
		c.MaxConcurrentRequests = DefaultMaxConcurrentRequests
	}
	if c.MaxInflightBodyBytes == 0 {
		c.MaxInflightBodyBytes = DefaultMaxInflightBodyBytes
	}
	return c
}

// Validate checks c with its defaults applied, as New does: main calls it
// before listening, so that a bad setting (such as a public address
// without auth) fails at once instead of being retried.
func (c Config) Validate() error { return c.WithDefaults().validate() }

// validate checks a config that WithDefaults has filled in, and names
// every bad field.
func (c Config) validate() error {
	var check config.Check
	bad := check.Bad
	if c.DatabaseURL == "" {
		bad("DatabaseURL", "is required")
	}
	if c.RedisURL == "" {
		bad("RedisURL", "is required")
	}
	check.RedisSentinel(c.RedisSentinelAddrs, c.RedisSentinelMaster)
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
		{"BacklogCheckInterval", c.BacklogCheckInterval},
	} {
		if d.d < 0 {
			bad(d.name, "must not be negative, got %s", d.d)
		}
	}
	if err := c.Auth.Validate(); err != nil {
		bad("Auth", "is invalid: %v", err)
	}
	if c.MaxBacklog < 0 {
		bad("MaxBacklog", "must not be negative (0: no bound), got %d", c.MaxBacklog)
	}
	if c.RateLimitRPS > 0 && c.RateLimitBurst < 1 {
		bad("RateLimitBurst", "must be positive, got %d", c.RateLimitBurst)
	}
	if msg := checkBasePath(c.UIBasePath); msg != "" {
		bad("UIBasePath", "%s, got %q", msg, c.UIBasePath)
	}
	if c.GrafanaURL != "" {
		if u, err := url.Parse(c.GrafanaURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			bad("GrafanaURL", "must be an http or https URL without credentials, query or fragment, got %q", c.GrafanaURL)
		}
	}
	if c.TraceURL != "" {
		if u, err := url.Parse(strings.ReplaceAll(c.TraceURL, "{trace_id}", "0")); err != nil || (u.Scheme != "http" && u.Scheme != "https") ||
			u.Host == "" || u.User != nil || !strings.Contains(c.TraceURL, "{trace_id}") {
			bad("TraceURL", "must be an http or https URL without credentials that holds {trace_id}, got %q", c.TraceURL)
		}
	}
	if err := auth.CheckListen(c.Addr, c.Auth.Enabled(), c.InsecureNoAuth); err != nil {
		bad("Addr", "is refused: %v", err)
	}
	return check.Err()
}

// basePath is a URL path of plain segments, without a trailing slash.
var basePath = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)+$`)

// apiSegments are the first path segments of the API's routes, which the
// console's base path must not shadow.
var apiSegments = []string{"submit_job", "submit_jobs", "jobs", "dlq", "stats", "admin", "healthz", "health", "readyz", "metrics",
	"api", "addJob", "failedJobs"}

// checkBasePath says what is wrong with p as Config.UIBasePath ("" if
// nothing).
func checkBasePath(p string) string {
	if !basePath.MatchString(p) || slices.ContainsFunc(strings.Split(p, "/"), func(seg string) bool { return seg == "." || seg == ".." }) {
		return "must be a path such as /ui: segments of A-Z a-z 0-9 . _ ~ -, no trailing slash"
	}
	first, _, _ := strings.Cut(p[1:], "/")
	if slices.Contains(apiSegments, first) {
		return "must not start with a segment of the API's routes"
	}
	return ""
}
