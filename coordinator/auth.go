package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file is the coordinator's side of security:
//
//   - Workers prove who they are with a credential in every heartbeat
//     (worker.Config.Credential, WORKER_CREDENTIAL). The leader checks it
//     against the unrevoked hashes in worker_credentials before the
//     heartbeat registers anything; a refused heartbeat is dropped whole,
//     including a "stopped" one (which would otherwise release another
//     worker's leases). The hashes are reloaded at most every
//     credentialCacheTTL, so a revocation takes effect within seconds and a
//     heartbeat costs no query.
//   - Results from a worker the leader has not registered are dropped,
//     counted, and acknowledged (so they are not read again).
//   - /workers needs a token with the admin scope when tokens are
//     configured, checked by the same code as the submitter's API.
//   - Without tokens the HTTP server listens on loopback only unless
//     AuthConfig.InsecureNoAuth says otherwise.
//
// Anyone who can write to Redis can still send results for a lease whose
// fencing token they know, under a registered worker's id: Redis must be
// private (docs/security.md).

// AuthConfig says who may talk to the coordinator.
type AuthConfig struct {
	// Tokens are the bearer tokens accepted on /workers, which then needs
	// the admin scope; the settings are the submitter's (AUTH_JWT_*,
	// AUTH_API_KEYS). Default none: /workers is open, and the HTTP server
	// must listen on loopback.
	Tokens auth.Config
	// RequireWorkerCredentials refuses heartbeats without a valid, unrevoked
	// worker credential. Default (nil): true when Tokens are configured,
	// false otherwise.
	RequireWorkerCredentials *bool
	// InsecureNoAuth allows a non-loopback listener without tokens.
	// Default false: Run refuses.
	InsecureNoAuth bool
}

// requireCredentials resolves RequireWorkerCredentials' default.
func (a AuthConfig) requireCredentials() bool {
	if a.RequireWorkerCredentials != nil {
		return *a.RequireWorkerCredentials
	}
	return a.Tokens.Enabled()
}

// Worker authentication timing.
const (
	// credentialCacheTTL is the longest the leader checks heartbeats
	// against a copy of worker_credentials: a revoked credential is refused
	// at most this long after its revocation.
	credentialCacheTTL = 5 * time.Second
	// credentialRetry spaces reloads after a failed one.
	credentialRetry = time.Second
	// refusalLogEvery bounds the log lines about one worker's refusals.
	refusalLogEvery = time.Minute
	// maxWarned bounds the workers whose last log line is remembered (ids
	// come from whoever writes to Redis).
	maxWarned = 10_000
)

// authState is the coordinator's authentication machinery, built by New.
type authState struct {
	required bool
	authn    httpx.Authenticator // nil: /workers is open
	failures *httpx.RateLimiter  // failed token checks per client IP

	authFailures    *prometheus.CounterVec // reason: missing, invalid, unverifiable
	resultsRejected *prometheus.CounterVec // reason: unregistered_worker

	mu       sync.Mutex
	hashes   map[string][]string // worker id → unrevoked credential hashes
	loadedAt time.Time           // zero: never loaded
	lastTry  time.Time
	warned   map[string]time.Time // worker id → last refusal logged
}

// initAuth builds c.auth from c.cfg.Auth and registers its metrics.
func (c *Coordinator) initAuth() error {
	a := &authState{
		required: c.cfg.Auth.requireCredentials(),
		warned:   map[string]time.Time{},
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dts_worker_auth_failures_total",
			Help: "Heartbeats refused because their worker credential was missing, invalid (unknown, revoked, or another worker's) or could not be checked."},
			[]string{"reason"}),
		resultsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dts_results_rejected_total",
			Help: "Results dropped (and acknowledged) unapplied, by reason: unregistered_worker is a result from a worker the leader does not know."},
			[]string{"reason"}),
	}
	for _, r := range []string{"missing", "invalid", "unverifiable"} {
		a.authFailures.WithLabelValues(r)
	}
	a.resultsRejected.WithLabelValues("unregistered_worker")
	c.reg.MustRegister(a.authFailures, a.resultsRejected)
	if c.cfg.Auth.Tokens.Enabled() {
		v, err := auth.NewVerifier(c.cfg.Auth.Tokens, c.store, nil)
		if err != nil {
			return err
		}
		a.authn = v
		a.failures = httpx.NewRateLimiter(1, 20, nil)
	}
	c.auth = a
	return nil
}

// requireAdmin guards a route with a token holding the admin scope, when
// tokens are configured.
func (c *Coordinator) requireAdmin(next http.Handler) http.Handler {
	if c.auth.authn == nil {
		return next
	}
	return httpx.Authenticate(c.auth.authn, c.auth.failures)(httpx.RequireScope(auth.ScopeAdmin)(next))
}

// checkListener applies the safe default to the listener Run serves on,
// and says so in the log when auth is off.
func (c *Coordinator) checkListener(ln net.Listener) error {
	addr := ln.Addr().String()
	enabled := c.cfg.Auth.Tokens.Enabled()
	if err := auth.CheckListen(addr, enabled, c.cfg.Auth.InsecureNoAuth); err != nil {
		return err
	}
	switch {
	case enabled:
	case auth.IsLoopbackAddr(addr):
		c.log.Warn(auth.LoopbackWarning, "addr", addr, "worker_credentials_required", c.auth.required)
	default:
		c.log.Warn("auth is off and /workers is reachable beyond loopback (--insecure-no-auth)", "addr", addr)
	}
	return nil
}

// workerAllowed reports whether a heartbeat may be applied: always when
// credentials are not required; otherwise only with a credential whose
// hash is among the worker's unrevoked ones. Refusals are counted and
// logged at most once a minute per worker. It is called for every
// heartbeat, so it queries PostgreSQL at most once per credentialCacheTTL.
func (c *Coordinator) workerAllowed(ctx context.Context, hb wire.Heartbeat) bool {
	a := c.auth
	if !a.required {
		return true
	}
	reason := a.check(ctx, c, hb.WorkerID, hb.Credential, time.Now())
	if reason == "" {
		return true
	}
	a.authFailures.WithLabelValues(reason).Inc()
	if a.shouldLog(hb.WorkerID, time.Now()) {
		c.log.WarnContext(ctx, "refused a heartbeat: worker credential "+reason+"; the worker is not registered",
			"worker_id", logID(hb.WorkerID), "hint", "create one with: coordinator worker-credential create -worker-id ID")
	}
	return false
}

// check returns "" for a good credential, else why it is refused.
func (a *authState) check(ctx context.Context, c *Coordinator, workerID, credential string, now time.Time) string {
	if credential == "" {
		return "missing"
	}
	if !auth.WellFormedWorkerCredential(credential) {
		return "invalid"
	}
	hashes, ok := a.snapshot(ctx, c, now)
	if !ok {
		return "unverifiable"
	}
	h := auth.HashSecret(credential)
	for _, want := range hashes[workerID] {
		if auth.HashesEqual(h, want) {
			return ""
		}
	}
	return "invalid"
}

// snapshot returns the credential hashes, reloading them when older than
// credentialCacheTTL. If a reload fails the previous copy is used (the
// leader cannot do much without PostgreSQL anyway, and dropping every
// heartbeat would reclaim every lease); ok is false only if no copy was
// ever loaded.
func (a *authState) snapshot(ctx context.Context, c *Coordinator, now time.Time) (map[string][]string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.loadedAt) < credentialCacheTTL || now.Sub(a.lastTry) < credentialRetry {
		return a.hashes, !a.loadedAt.IsZero()
	}
	a.lastTry = now
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	hashes, err := c.store.WorkerCredentialHashes(qctx)
	if err != nil {
		if ctx.Err() == nil {
			c.metrics.countStoreError(storeOpLoadWorkerCredentials)
			c.log.ErrorContext(ctx, "postgres operation failed", "op", storeOpLoadWorkerCredentials, "error", err)
		}
		return a.hashes, !a.loadedAt.IsZero()
	}
	a.hashes, a.loadedAt = hashes, now
	return hashes, true
}

// shouldLog reports whether a refusal concerning workerID is to be logged
// now: once per refusalLogEvery per worker.
func (a *authState) shouldLog(workerID string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if last, ok := a.warned[workerID]; ok && now.Sub(last) < refusalLogEvery {
		return false
	}
	if len(a.warned) >= maxWarned {
		clear(a.warned)
	}
	a.warned[workerID] = now
	return true
}

// filterUnregistered drops the results of workers the leader's registry
// does not know (it knows every worker that heartbeat with a valid
// credential, and every worker holding a lease when it became leader), and
// counts them. It returns a new slice when it drops any: the caller's
// slice, whose ids resultLoop acknowledges, is left as it was, so dropped
// results are acknowledged with the rest and never read again.
func (c *Coordinator) filterUnregistered(l *leaderState, rs []queue.ReceivedResult) []queue.ReceivedResult {
	if len(rs) == 0 {
		return rs
	}
	// The ids of a read: a worker's results come in runs (one batch entry
	// each), so this is about one id per worker that sent.
	ids := make([]string, 0, 8)
	for i := range rs {
		if id := rs[i].Result.WorkerID; i == 0 || id != rs[i-1].Result.WorkerID {
			ids = append(ids, id)
		}
	}
	known := l.workers.Known(ids)
	var kept []queue.ReceivedResult
	for i, r := range rs {
		if known[r.Result.WorkerID] {
			if kept != nil {
				kept = append(kept, r)
			}
			continue
		}
		if kept == nil {
			kept = append(make([]queue.ReceivedResult, 0, len(rs)), rs[:i]...)
		}
		c.auth.resultsRejected.WithLabelValues("unregistered_worker").Inc()
		if c.auth.shouldLog("results:"+r.Result.WorkerID, time.Now()) {
			c.log.Warn("dropped a result from an unregistered worker", "worker_id", logID(r.Result.WorkerID), "job_id", r.Result.JobID)
		}
	}
	if kept == nil {
		return rs
	}
	return kept
}

// logID bounds a worker id that came from Redis before it is logged.
func logID(id string) string {
	id = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, id)
	if len(id) > 100 {
		return id[:100] + "..."
	}
	return id
}

// ---- worker credential management ----

// CredentialAdmin creates, lists and revokes worker credentials in
// PostgreSQL; the `coordinator worker-credential` subcommands use it.
type CredentialAdmin struct {
	store *store.Store
}

// OpenCredentialAdmin connects to PostgreSQL (applying migrations).
func OpenCredentialAdmin(ctx context.Context, databaseURL string) (*CredentialAdmin, error) {
	st, err := store.Open(ctx, databaseURL, store.Options{MaxConns: 2, Migrate: true})
	if err != nil {
		return nil, err
	}
	return &CredentialAdmin{store: st}, nil
}

// Close closes the connection.
func (a *CredentialAdmin) Close() { a.store.Close() }

// Create makes a new credential for workerID and records actor in the
// audit log. The secret is returned this once; only its hash is stored.
// A worker's earlier credentials stay valid until revoked.
func (a *CredentialAdmin) Create(ctx context.Context, actor, workerID string) (string, store.WorkerCredential, error) {
	if err := checkWorkerID(workerID); err != nil {
		return "", store.WorkerCredential{}, err
	}
	secret, hash := auth.NewWorkerCredential()
	cred, err := a.store.WorkerCredentialInsert(ctx, workerID, hash, actor)
	if err != nil {
		return "", store.WorkerCredential{}, err
	}
	return secret, cred, nil
}

// List returns every credential (never a secret), newest first.
func (a *CredentialAdmin) List(ctx context.Context) ([]store.WorkerCredential, error) {
	return a.store.WorkerCredentialList(ctx)
}

// Revoke revokes every active credential of workerID and returns how many.
// The leader refuses the worker's heartbeats within credentialCacheTTL;
// after its heartbeat deadline the worker is unavailable and its leases
// are reclaimed.
func (a *CredentialAdmin) Revoke(ctx context.Context, actor, workerID string) (int64, error) {
	if err := checkWorkerID(workerID); err != nil {
		return 0, err
	}
	return a.store.WorkerCredentialRevoke(ctx, workerID, actor)
}

func checkWorkerID(id string) error {
	switch {
	case id == "":
		return errors.New("worker id is required")
	case len(id) > 200:
		return fmt.Errorf("worker id is %d bytes; at most 200", len(id))
	case strings.ContainsFunc(id, unicode.IsControl):
		return errors.New("worker id contains control characters")
	}
	return nil
}
