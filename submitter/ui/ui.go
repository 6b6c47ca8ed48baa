// Package ui is the operations console: HTML pages served by the
// submitter (under Config.UIBasePath, /ui by default) to look at jobs and
// the dead-letter queue and to requeue dead jobs.
//
// Why it is shaped this way: pages are rendered on the server with
// html/template, so every value shown is escaped by the template engine,
// and every page is a plain URL that holds its filters (deep links and the
// back button work, and so does the console with JavaScript off). htmx
// (vendored, embedded, never fetched from another origin) only swaps the
// results of a search or a page in place and pushes the URL. Every action
// is a <form method=post>. The handlers call the same application as the
// JSON API (the Service interface, which package app implements in the
// console's own types: App.Console), so validation, store error counting
// and the audit log are the API's.
//
// Links are relative (Page.Root is "./", "../" or "../../"), so the
// console works under any base path and behind a proxy that adds or
// strips a prefix; no handler needs to know where it is mounted.
//
// What must stay true:
//   - No template output bypasses html/template's escaping (no
//     template.HTML built from data).
//   - Every answer carries the security headers (CSP with a per-answer
//     nonce, X-Frame-Options DENY, nosniff, no-store); htmx runs with eval,
//     script tags and its inline styles off, so the CSP needs no
//     'unsafe-*'.
//   - Every POST passes http.CrossOriginProtection; every action checks
//     the admin scope itself (the read scope sees no controls, and its
//     forged POSTs get 403), and goes through Service, which audits it
//     with the acting principal.
//   - The login cookie holds the token, HttpOnly and SameSite=Strict (and
//     Secure under TLS); it is never logged or shown.
package ui

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
)

// Service is what the console reads and changes, the service layer the
// JSON API's handlers call too. Errors are the API's (*httpx.Error, the
// job sentinels): httpx.Classify tells their status and message. Actions
// read the acting principal from ctx (httpx.WithPrincipal) for the audit
// log.
type Service interface {
	OpsService   // ops.go
	QueueService // queues.go
	DeadService  // dlq.go
	Stats(ctx context.Context) (wire.StatsResponse, error)
	Leader(ctx context.Context) (id string, epoch int64, err error)
	JobGet(ctx context.Context, id int64) (wire.Job, error)
	// JobTimeline returns a job with its attempts and timeline (GET
	// /jobs/{id}/timeline).
	JobTimeline(ctx context.Context, id int64) (wire.JobTimeline, error)
	// JobLogs returns a job's first limit log lines, oldest first, with
	// its attempts' dropped counts (GET /jobs/{id}/logs).
	JobLogs(ctx context.Context, id int64, limit int64) (wire.JobLogs, error)
	// JobGetByKey returns the job holding an idempotency key.
	JobGetByKey(ctx context.Context, key string) (wire.Job, error)
	// JobSearch returns a page of the jobs p selects that pass scan's
	// tests; after a time budget it stops, says so (stopped) and gives
	// where to go on (NextCursor).
	JobSearch(ctx context.Context, p ListParams, scan Scan) (resp wire.JobListResponse, stopped bool, err error)
	JobList(ctx context.Context, p ListParams) (wire.JobListResponse, error)
	// Rollup returns the per-minute rollup rows from since on (live.go,
	// charts.go).
	Rollup(ctx context.Context, since time.Time) ([]RollupRow, error)
	// Queues returns each queue's counts and settings (GET /queues).
	Queues(ctx context.Context) (wire.QueueListResponse, error)
}

// Config configures the console.
type Config struct {
	// Authn checks the token a user logs in with (an API key or a JWT, as
	// on the API). Default nil: auth is off, no login, every visitor acts
	// as anonymous with every scope (allowed on loopback only, as the API).
	Authn httpx.Authenticator
	// Failures limits failed logins and bad login cookies per client
	// address (the API's limiter of failed authentications, so the API and
	// the console share one budget; httpx.CheckToken). Default nil: no
	// limit.
	Failures *httpx.RateLimiter
	// StatsInterval is how often the console's one refresher reads the
	// counts while someone looks (live.go), whatever the number of
	// viewers. Default DefaultStatsInterval (1s).
	StatsInterval time.Duration
	// GrafanaURL is the base URL of the Grafana serving deploy/grafana's
	// dashboard; each chart links to its panel. Default "": no links.
	GrafanaURL string
	// TraceURL is the link of a trace, "{trace_id}" standing for its id:
	// the Job page links a traced job to its trace. Default "": the trace
	// id without a link.
	TraceURL string
	// MaxPayloadBytes is the largest payload the service accepts (the
	// submitter's MAX_PAYLOAD_BYTES): it sizes the body limit of the form
	// that requeues a dead job with an edited payload (the service checks
	// the payload itself). Default 0: maxInlineBytes (256 KiB), the
	// largest payload the form is offered for.
	MaxPayloadBytes int
	// Logger receives the errors behind 5xx pages. Default slog.Default().
	Logger *slog.Logger
}

// DefaultStatsInterval is Config.StatsInterval's default.
const DefaultStatsInterval = time.Second

// The vendored scripts (static/), from npm: scripts/vendor-htmx.sh fetches
// them, TestVendoredScripts checks their version and SHA-256.
const (
	HTMXVersion    = "2.0.11"
	HTMXFile       = "htmx-" + HTMXVersion + ".min.js"
	HTMXSSEVersion = "2.2.4"
	HTMXSSEFile    = "htmx-ext-sse-" + HTMXSSEVersion + ".min.js"
)

// SearchBudget is how long a search in steps (payload:, worker:, error: on the Jobs page)
// may go on: the service given to New stops it then and says so.
const SearchBudget = 2 * time.Second

// cookieName holds the token of a logged-in user.
const cookieName = "dts_console"

// Limits of form bodies and of one page.
const (
	maxFormBytes   = 64 << 10
	pageSize       = 50
	maxRequeueIDs  = 1000
	maxInlineBytes = 256 << 10 // larger payloads and results are a download
	maxPrettyDepth = 32        // deeper JSON is shown compact, as stored
	// maxQueryLen bounds a search: room for a dead-letter group's name and
	// fingerprint (128 and 200 characters), quoted with escapes.
	maxQueryLen = 4096
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console is the console's HTTP handler.
type Console struct {
	svc     Service
	cfg     Config
	pages   map[string]*template.Template
	snap    *refresher
	streams atomic.Int32 // open event streams
	lists   sharedLists
	groups  deadGroups // dlq.go
	handler http.Handler
}

// New builds the console over svc.
func New(svc Service, cfg Config) (*Console, error) {
	if cfg.StatsInterval <= 0 {
		cfg.StatsInterval = DefaultStatsInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = cfg.Logger.With("component", "console")
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	c := &Console{svc: svc, cfg: cfg, pages: pages, snap: newRefresher(svc, cfg.StatsInterval, time.Now)}
	c.handler = c.routes()
	return c, nil
}

// ServeHTTP serves the console. Mount it under a base path (chi's Mount
// strips nothing: links are relative to the page).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

// Close stops the refresher and ends every event stream (their pages
// reconnect elsewhere or poll). Pages served after it fail with 503. It
// is idempotent; call it when the server shuts down, which would
// otherwise wait for the streams.
func (c *Console) Close() { c.snap.close() }

// Warm starts the refresher's first read without waiting for it, so that
// the first page after start-up finds the counts read (they take 0.3 s on
// a million jobs) instead of waiting for them. It does not count as a
// viewer: after that one read the refresher idles until someone looks.
func (c *Console) Warm() { c.snap.warmUp() }

// Changed tells the console that this process just changed jobs (a
// submit, a requeue), so that open pages show it soon. It never blocks.
func (c *Console) Changed() { c.snap.nudge() }

func (c *Console) routes() http.Handler {
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, httpx.Errorf(http.StatusNotFound, wire.CodeRouteNotFound, "no such page"))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, httpx.Errorf(http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "method not allowed"))
	})
	r.Get("/static/{file}", serveStatic)
	r.Get("/login", c.loginPage)
	r.Post("/login", c.login)
	r.Post("/logout", c.logout)
	r.Group(func(r chi.Router) {
		r.Use(c.authenticate)
		r.Get("/", c.overview)
		r.Get("/live", c.live)
		r.Get("/live/poll", c.poll)
		r.Get("/charts", c.charts)
		r.Get("/jobs", c.jobs)
		r.Get("/jobs/{id}", c.job)
		r.Get("/jobs/{id}/{part:payload|result}", c.download)
		r.Post("/jobs/{id}/cancel", c.cancelJob)
		r.Post("/jobs/{id}/delete", c.deleteJob)
		r.Get("/dlq", c.dead)
		r.Post("/dlq/requeue", c.requeueSelected)
		r.Get("/dlq/{id}/edit", c.editPage)
		r.Post("/dlq/{id}/requeue", c.requeueOne)
		c.opsRoutes(r)   // ops.go
		c.queueRoutes(r) // queues.go
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, httpx.Errorf(http.StatusForbidden, wire.CodeForbidden, "cross-origin request refused"))
	}))
	return c.relative(c.secure(cop.Handler(r)))
}

type ctxKey int

const (
	rootKey ctxKey = iota
	nonceKey
)

// relative records the page's way back to the console's root ("./",
// "../", ...), from the path inside the mount point (chi's RoutePath when
// mounted, the URL path otherwise).
func (c *Console) relative(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.EscapedPath() // an escaped "/" in an id is no level
		if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePath != "" {
			p = rctx.RoutePath
		}
		root := "./"
		if n := strings.Count(p, "/"); n > 1 {
			root = strings.Repeat("../", n-1)
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), rootKey, root)))
	})
}

func rootOf(r *http.Request) string {
	if s, ok := r.Context().Value(rootKey).(string); ok {
		return s
	}
	return "./"
}

func nonceOf(r *http.Request) string {
	s, _ := r.Context().Value(nonceKey).(string)
	return s
}

// secure sets the security headers of every answer, with a fresh CSP
// nonce for the page's script and style tags.
func (c *Console) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 16)
		_, _ = rand.Read(b) // never fails (crypto/rand)
		nonce := base64.RawURLEncoding.EncodeToString(b)
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'nonce-"+nonce+"'; style-src 'self' 'nonce-"+nonce+
			"'; img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		h.Set("Vary", "HX-Request, Cookie")
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), nonceKey, nonce)))
	})
}

// serveStatic serves the embedded files of static/.
func serveStatic(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "file")
	b, err := fs.ReadFile(staticFS, "static/"+name)
	if err != nil || strings.HasPrefix(name, "LICENSE") {
		http.NotFound(w, r)
		return
	}
	ct := "application/octet-stream"
	switch {
	case strings.HasSuffix(name, ".js"):
		ct = "text/javascript; charset=utf-8"
	case strings.HasSuffix(name, ".css"):
		ct = "text/css; charset=utf-8"
	case strings.HasSuffix(name, ".svg"):
		ct = "image/svg+xml"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(b)
}

// authenticate reads the login cookie and checks its token as the API
// checks a bearer token (httpx.CheckToken): a bad one is charged to the
// address's budget of failed authentications, so forged cookies are no
// way around it, and once that is spent they get 429; a good one is
// always served. Without a good one, a page asks for a login (keeping
// where the user was going); a POST is refused. With auth off, every
// visitor is anonymous, with every scope.
func (c *Console) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.Authn == nil {
			next.ServeHTTP(w, r.WithContext(httpx.WithPrincipal(r.Context(), auth.Anonymous)))
			return
		}
		var p auth.Principal
		err := &auth.Error{Reason: "not logged in"}
		var verr error
		if ck, cerr := r.Cookie(cookieName); cerr == nil && ck.Value != "" {
			var retry time.Duration
			p, retry, verr = httpx.CheckToken(r, c.cfg.Authn, c.cfg.Failures, "Bearer "+ck.Value)
			var ae *auth.Error
			switch {
			case errors.As(verr, &ae) && retry > 0:
				clearCookie(w, r)
				secs := setRetryAfter(w, retry)
				c.fail(w, r, httpx.Errorf(http.StatusTooManyRequests, wire.CodeRateLimited,
					"too many failed authentication attempts from this address; retry in %d s", secs))
				return
			case errors.As(verr, &ae):
				err = ae
				clearCookie(w, r)
			case verr != nil:
				c.fail(w, r, verr)
				return
			default:
				err = nil
			}
		}
		if err != nil {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				c.fail(w, r, httpx.Errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "log in first"))
				return
			}
			redirect(w, rootOf(r)+"login?next="+url.QueryEscape(here(r)))
			return
		}
		if !p.Has(auth.ScopeRead) {
			c.fail(w, r, httpx.Errorf(http.StatusForbidden, wire.CodeForbidden, "the console needs the read scope; this token has: %s", strings.Join(p.Scopes, ", ")))
			return
		}
		next.ServeHTTP(w, r.WithContext(httpx.WithPrincipal(r.Context(), p)))
	})
}

// here is the request's place inside the console ("jobs?q=..."), for
// coming back after a login.
func here(r *http.Request) string {
	p := r.URL.Path
	if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePath != "" {
		p = rctx.RoutePath
	}
	p = strings.TrimPrefix(p, "/")
	if r.URL.RawQuery != "" {
		p += "?" + r.URL.RawQuery
	}
	return p
}

// redirect answers 303 with a relative Location, which the browser
// resolves against the URL it asked for (so a proxy's prefix is kept).
// http.Redirect would make it absolute from the path the server saw.
func redirect(w http.ResponseWriter, loc string) {
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusSeeOther)
}

// setRetryAfter sets Retry-After to wait in whole seconds, at least 1,
// and returns them.
func setRetryAfter(w http.ResponseWriter, wait time.Duration) int64 {
	secs := max(int64(math.Ceil(wait.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	return secs
}

func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// fail renders err as an error page with its status, as httpx.Classify
// maps it; a 5xx's cause goes to the log only.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, body := httpx.Classify(err)
	if status >= 500 {
		c.cfg.Logger.ErrorContext(r.Context(), "console page failed", "path", r.URL.Path, "code", body.Code, "error", err)
	}
	if body.Code == wire.CodeStoreUnavailable {
		w.Header().Set("Retry-After", httpx.StoreRetryAfter)
	}
	c.render(w, r, status, "error", Page{Title: http.StatusText(status), Data: errorData{Status: status, Code: body.Code, Message: body.Message}})
}

type errorData struct {
	Status        int
	Code, Message string
}

// adminForm checks a console action before it runs: the admin scope,
// then the form. On failure it has answered and reports false.
func (c *Console) adminForm(w http.ResponseWriter, r *http.Request) bool {
	return c.adminFormMax(w, r, maxFormBytes)
}

// adminFormMax is adminForm for a form of up to limit bytes.
func (c *Console) adminFormMax(w http.ResponseWriter, r *http.Request, limit int64) bool {
	err := requireAdmin(r)
	if err == nil {
		err = parseForm(w, r, limit)
	}
	if err != nil {
		c.fail(w, r, err)
		return false
	}
	return true
}

// requireAdmin refuses an action to a principal without the admin scope.
func requireAdmin(r *http.Request) error {
	p := httpx.PrincipalFrom(r.Context())
	if !p.Has(auth.ScopeAdmin) {
		return httpx.Errorf(http.StatusForbidden, wire.CodeForbidden, "this action needs the admin scope; you have: %s", strings.Join(p.Scopes, ", "))
	}
	return nil
}

// parseForm reads a POST form of at most limit bytes.
func parseForm(w http.ResponseWriter, r *http.Request, limit int64) error {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidField, "form: %v", err)
	}
	return nil
}
