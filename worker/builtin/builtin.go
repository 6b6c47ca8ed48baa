// Package builtin provides the job handlers the bundled worker offers out of
// the box, for demos, benchmarks and the stress scripts in scripts/: the job
// types of the original system (cpu_intensive, io_intensive, mixed_workload,
// network_task and, for its scripts' names "default" and "test_job", a
// variable-length sleep), plus noop, sleep, webhook and email.
//
// No handler here takes every name: a job whose name nobody handles stays
// pending where it can be seen (GET /stats unknown_names), instead of
// "succeeding" as a sleep. A library user may still register a catch-all
// under "*" with worker.Handle.
//
// They keep the original's observable behaviour where the scripts depend on
// it: a payload containing "invalid_job" fails the attempt with a plain,
// retryable error (ErrInvalidJob), so such a job uses up its retries and then
// lands in the dead-letter queue. They fix what the original got wrong: every
// handler returns promptly once ctx is done, io_intensive writes a file with a
// unique name per attempt and always removes it, and network_task really makes
// its requests and fails when they fail.
//
// What must stay true: handlers keep no state between attempts and are safe
// for concurrent use; errors that retrying cannot fix (a malformed payload, a
// 4xx HTTP answer, a 5xx SMTP answer) are marked worker.Permanent; and the
// package imports only the standard library, the stdlib-only internal/retry
// and, for email, github.com/wneessen/go-mail (net/smtp is frozen). The
// worker SDK itself (package worker) imports none of them.
package builtin

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/dtsched/dts/worker"
)

// Names of the handlers Register installs.
const (
	NameCPUIntensive  = "cpu_intensive"
	NameIOIntensive   = "io_intensive"
	NameMixedWorkload = "mixed_workload"
	NameNetworkTask   = "network_task"
	NameNoop          = "noop"
	NameSleep         = "sleep"
	NameWebhook       = "webhook"
	NameEmail         = "email"

	// NameDefault and NameTestJob are the names Register gives Fallback
	// when Config.Fallback is set: the names the original's scripts send
	// to its catch-all simulate_variable_work. No other name reaches it.
	NameDefault = "default"
	NameTestJob = "test_job"
)

// FallbackNames are the names Fallback is registered under.
var FallbackNames = []string{NameDefault, NameTestJob}

// ErrInvalidJob is returned by every handler in this package when the job's
// payload contains "invalid_job". It is deliberately not permanent: such jobs
// are retried and then dead-lettered, as the original stress scripts expect.
var ErrInvalidJob = errors.New("invalid job content")

// Config configures the built-in handlers. The zero value is usable: every
// zero (or negative) field takes its default.
type Config struct {
	// NetworkURL is the URL each network_task GETs.
	// Default "http://127.0.0.1:8000/healthz" (the local submitter).
	NetworkURL string
	// NetworkRequests is how many GETs one network_task sends, concurrently.
	// Default 3.
	NetworkRequests int
	// Fallback makes Register also register Fallback under FallbackNames
	// (the original's "default" and "test_job"), which run a
	// variable-length sleep. Other names are not caught. Default false.
	Fallback bool
	// FallbackMin and FallbackMax bound the fallback's sleep.
	// Defaults 100ms and 50s; a FallbackMax below FallbackMin is raised to it.
	FallbackMin, FallbackMax time.Duration
	// CPUWork is how long one cpu_intensive job hashes, measured as elapsed
	// time on the one goroutine doing it. Default 1s.
	CPUWork time.Duration
	// IODir is the directory io_intensive writes its temporary files in.
	// Default os.TempDir().
	IODir string
	// HTTPClient sends network_task's requests (to NetworkURL, which the
	// operator chooses, so it is not guarded). Default: a client with a 30s
	// timeout and the default transport.
	HTTPClient *http.Client
	// WebhookMaxBody is how many bytes of a webhook's response body are kept
	// in the job's result; more are not read. Default 4096.
	WebhookMaxBody int64
	// WebhookAllow names the non-public destinations webhook may connect
	// to: CIDRs ("10.1.0.0/16"), addresses ("127.0.0.1") or host names
	// ("hooks.internal": any address it resolves to). Default none: webhook
	// refuses loopback, private (RFC 1918, fc00::/7), link-local (cloud
	// metadata), unspecified, multicast and other reserved addresses,
	// checked on the address dialed and on every redirect (guard.go).
	WebhookAllow []string
	// WebhookTimeout bounds one webhook request, redirects and the response
	// body included. Default 30s.
	WebhookTimeout time.Duration
	// SMTPHost is the SMTP server email jobs are sent through. Default
	// none: Register does not install email at all, so email jobs stay
	// pending as an unknown name (GET /stats unknown_names) until a worker
	// that can send them starts; they never "succeed" unsent.
	SMTPHost string
	// SMTPPort is SMTPHost's port. Default by SMTPTLS: 25 (none), 587
	// (starttls), 465 (implicit).
	SMTPPort int
	// SMTPTLS is how the connection is secured: SMTPTLSStartTLS (the
	// server must offer STARTTLS, else every attempt fails),
	// SMTPTLSImplicit (TLS from the first byte) or SMTPTLSNone. Default
	// starttls. The server's certificate is always verified.
	SMTPTLS string
	// SMTPUsername and SMTPPassword, when SMTPUsername is set, log in with
	// the strongest mechanism the server offers (PLAIN over SMTPTLSNone,
	// which is allowed only to a loopback host). Default none: no AUTH.
	SMTPUsername, SMTPPassword string
	// SMTPFrom is the sender (From header and envelope), e.g.
	// "Shop <noreply@shop.example>"; required with SMTPHost. Its domain
	// ends every Message-ID.
	SMTPFrom string
	// SMTPRootCAs verifies the server's certificate. Default: the system's
	// roots.
	SMTPRootCAs *x509.CertPool
	// SMTPTimeout bounds the connection and each SMTP command. Default 30s.
	SMTPTimeout time.Duration
}

// Defaults of the Config fields.
const (
	DefaultNetworkURL       = "http://127.0.0.1:8000/healthz"
	DefaultNetworkRequests  = 3
	DefaultFallbackMin      = 100 * time.Millisecond
	DefaultFallbackMax      = 50 * time.Second
	DefaultCPUWork          = time.Second
	DefaultHTTPTimeout      = 30 * time.Second
	DefaultWebhookMaxBody   = 4096
	DefaultWebhookTimeout   = 30 * time.Second
	DefaultSMTPTLS          = SMTPTLSStartTLS
	DefaultSMTPPortNone     = 25
	DefaultSMTPPortSTARTTLS = 587
	DefaultSMTPPortImplicit = 465
	DefaultSMTPTimeout      = 30 * time.Second
)

// DefaultFallback is cmd/worker's -fallback default: the bundled binary runs
// any job name. Config.Fallback itself stays false unless set, so that a
// program registering its own handlers opts in.
const DefaultFallback = true

// WithDefaults returns a copy of c with every unset field set to its default.
// A new HTTPClient is created when none is set.
func (c Config) WithDefaults() Config {
	if c.NetworkURL == "" {
		c.NetworkURL = DefaultNetworkURL
	}
	if c.NetworkRequests <= 0 {
		c.NetworkRequests = DefaultNetworkRequests
	}
	if c.FallbackMin <= 0 {
		c.FallbackMin = DefaultFallbackMin
	}
	if c.FallbackMax <= 0 {
		c.FallbackMax = DefaultFallbackMax
	}
	if c.FallbackMax < c.FallbackMin {
		c.FallbackMax = c.FallbackMin
	}
	if c.CPUWork <= 0 {
		c.CPUWork = DefaultCPUWork
	}
	if c.IODir == "" {
		c.IODir = os.TempDir()
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if c.WebhookMaxBody <= 0 {
		c.WebhookMaxBody = DefaultWebhookMaxBody
	}
	if c.WebhookTimeout <= 0 {
		c.WebhookTimeout = DefaultWebhookTimeout
	}
	if c.SMTPTLS == "" {
		c.SMTPTLS = DefaultSMTPTLS
	}
	if c.SMTPPort == 0 {
		switch c.SMTPTLS {
		case SMTPTLSNone:
			c.SMTPPort = DefaultSMTPPortNone
		case SMTPTLSImplicit:
			c.SMTPPort = DefaultSMTPPortImplicit
		default:
			c.SMTPPort = DefaultSMTPPortSTARTTLS
		}
	}
	if c.SMTPTimeout <= 0 {
		c.SMTPTimeout = DefaultSMTPTimeout
	}
	return c
}

// Validate reports the first field of c (after WithDefaults) that the
// handlers cannot work with. Register does not call it: a worker binary
// should, at startup, to fail fast on a bad flag.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if _, err := parseHTTPURL(c.NetworkURL); err != nil {
		return fmt.Errorf("builtin: NetworkURL: %w", err)
	}
	if st, err := os.Stat(c.IODir); err != nil {
		return fmt.Errorf("builtin: IODir: %w", err)
	} else if !st.IsDir() {
		return fmt.Errorf("builtin: IODir: %s is not a directory", c.IODir)
	}
	if _, err := newAddrGuard(c.WebhookAllow); err != nil {
		return fmt.Errorf("builtin: WebhookAllow: %w", err)
	}
	if _, err := checkSMTP(c); err != nil {
		return fmt.Errorf("builtin: %w", err)
	}
	return nil
}

// Registrar is what Register installs handlers on; *worker.Worker is one.
type Registrar interface {
	Handle(name string, h worker.HandlerFunc)
}

// Register installs every named handler of this package on r: email only
// when cfg.SMTPHost is set, Fallback under FallbackNames only when
// cfg.Fallback is.
func Register(r Registrar, cfg Config) {
	h := newHandlers(cfg)
	r.Handle(NameCPUIntensive, h.cpuIntensive)
	r.Handle(NameIOIntensive, h.ioIntensive)
	r.Handle(NameMixedWorkload, h.mixedWorkload)
	r.Handle(NameNetworkTask, h.networkTask)
	r.Handle(NameNoop, noop)
	r.Handle(NameSleep, sleep)
	r.Handle(NameWebhook, h.webhook)
	if h.cfg.SMTPHost != "" {
		r.Handle(NameEmail, h.email)
	}
	if h.cfg.Fallback {
		f := Fallback(h.cfg)
		for _, name := range FallbackNames {
			r.Handle(name, f)
		}
	}
}

// handlers holds the configuration the handlers share. It is read-only after
// newHandlers, so its methods are safe for concurrent use.
type handlers struct {
	cfg         Config
	networkURL  *url.URL // nil when cfg.NetworkURL is invalid
	networkErr  error    // why it is invalid
	webhookC    *http.Client
	guardErr    error  // why cfg.WebhookAllow is invalid; webhook then refuses every job
	emailDomain string // of cfg.SMTPFrom: Message-IDs end with it
	emailErr    error  // why the SMTP fields are invalid; email then refuses every job
}

func newHandlers(cfg Config) *handlers {
	h := &handlers{cfg: cfg.WithDefaults()}
	h.networkURL, h.networkErr = parseHTTPURL(h.cfg.NetworkURL)
	g, err := newAddrGuard(h.cfg.WebhookAllow)
	if err != nil {
		h.guardErr = err
		g = &addrGuard{hosts: map[string]bool{}} // allows nothing non-public
	}
	h.webhookC = newWebhookClient(g, h.cfg.WebhookTimeout)
	h.emailDomain, h.emailErr = checkSMTP(h.cfg)
	return h
}

// parseHTTPURL parses an absolute http or https URL with a host.
func parseHTTPURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme must be http or https: %q", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("missing host: %q", u.Redacted())
	}
	return u, nil
}

var invalidMarker = []byte("invalid_job")

// invalid reports whether the job's payload, as PayloadString shows it,
// contains "invalid_job". It does not allocate unless the payload holds a
// backslash (a JSON string could spell the marker with escapes).
func invalid(job *worker.Job) bool {
	if bytes.Contains(job.Payload, invalidMarker) {
		return true
	}
	if bytes.IndexByte(job.Payload, '\\') < 0 {
		return false
	}
	return strings.Contains(job.PayloadString(), "invalid_job")
}

// noop is the benchmark job: it does nothing and returns no result.
func noop(_ context.Context, job *worker.Job) (any, error) {
	if invalid(job) {
		return nil, ErrInvalidJob
	}
	return nil, nil
}
