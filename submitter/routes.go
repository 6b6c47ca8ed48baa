package submitter

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
)

// route is one route of the JSON API: who may call it, how large its body
// may be, and the handler (in the file of its resource). docs/api.md
// documents each.
type route struct {
	method, path string
	scope        string // auth.ScopeSubmit, ScopeRead or ScopeAdmin
	body         bodyLimit
	handler      func(http.ResponseWriter, *http.Request) error
}

// bodyLimit is the body size a route accepts.
type bodyLimit int

const (
	noBody   bodyLimit = iota // GET and DELETE: a body is not read
	bodyMax                   // Config.MaxBodyBytes
	batchMax                  // Config.MaxBatchBodyBytes
)

// apiRoutes is the JSON API, every route in one table. The probes, the
// metrics and the console are added by routes.
func (s *Server) apiRoutes() []route {
	const (
		submit = auth.ScopeSubmit
		read   = auth.ScopeRead
		admin  = auth.ScopeAdmin
		get    = http.MethodGet
		post   = http.MethodPost
		put    = http.MethodPut
		del    = http.MethodDelete
	)
	return []route{
		// Submission (handlers.go).
		{post, "/submit_job", submit, bodyMax, s.submitJob},
		{post, "/jobs", submit, bodyMax, s.postJobs},
		{post, "/submit_jobs", submit, batchMax, s.submitJobs},

		// Jobs (handlers.go, timeline.go, logs.go, scheduled.go).
		{get, "/jobs", read, noBody, s.listJobs},
		{get, "/jobs/scheduled", read, noBody, s.listScheduled},
		{get, "/jobs/{id}", read, noBody, s.getJob},
		{get, "/jobs/{id}/timeline", read, noBody, s.getJobTimeline},
		{get, "/jobs/{id}/logs", read, noBody, s.getJobLogs},
		{post, "/jobs/{id}/cancel", admin, bodyMax, s.cancelJob},
		{post, "/jobs/{id}/run_now", admin, bodyMax, s.runNow},
		{del, "/jobs/{id}", admin, noBody, s.deleteJob},
		{post, "/jobs/bulk", admin, bodyMax, s.bulkJobs},

		// Dead letters, stats (handlers.go).
		{get, "/dlq", read, noBody, s.listDead},
		{post, "/dlq/{id}/requeue", admin, bodyMax, s.requeueDead},
		{get, "/stats", read, noBody, s.stats},

		// Workers (workers.go).
		{get, "/workers", read, noBody, s.listWorkers},
		{get, "/workers/{id}", read, noBody, s.getWorker},
		{post, "/workers/{id}/drain", admin, bodyMax, s.drainWorker},
		{post, "/workers/{id}/undrain", admin, bodyMax, s.undrainWorker},

		// Bulk operations (operations.go).
		{get, "/operations", read, noBody, s.listOperations},
		{get, "/operations/{id}", read, noBody, s.getOperation},
		{post, "/operations/{id}/cancel", admin, bodyMax, s.cancelOperation},

		// Schedules (schedules.go).
		{get, "/schedules", read, noBody, s.listSchedules},
		{get, "/schedules/{id}", read, noBody, s.getSchedule},
		{post, "/schedules", admin, bodyMax, s.createSchedule},
		{post, "/schedules/{id}/pause", admin, bodyMax, s.pauseSchedule},
		{post, "/schedules/{id}/resume", admin, bodyMax, s.resumeSchedule},
		{post, "/schedules/{id}/trigger", admin, bodyMax, s.triggerSchedule},
		{del, "/schedules/{id}", admin, noBody, s.deleteSchedule},

		// Queues (queues.go).
		{get, "/queues", read, noBody, s.listQueues},
		{post, "/queues/{name}/pause", admin, bodyMax, s.pauseQueue},
		{post, "/queues/{name}/resume", admin, bodyMax, s.resumeQueue},
		{put, "/queues/{name}", admin, bodyMax, s.updateQueue},
		{post, "/queues/{name}", admin, bodyMax, s.updateQueue},

		// Limits (limits.go).
		{get, "/limits", read, noBody, s.listLimits},
		{put, "/limits/{key}", admin, bodyMax, s.putLimit},
		{del, "/limits/{key}", admin, noBody, s.deleteLimit},

		// Tokens and the audit log (admin.go).
		{post, "/admin/tokens", admin, bodyMax, s.createToken},
		{get, "/admin/tokens", admin, noBody, s.listTokens},
		{del, "/admin/tokens/{id}", admin, noBody, s.revokeToken},
		{get, "/admin/audit", admin, noBody, s.listAudit},

		// The originals' routes (compat.go).
		{post, "/api/tasks", submit, bodyMax, s.createTask},
		{get, "/api/tasks/{id}", read, noBody, s.getTask},
		{post, "/addJob", submit, bodyMax, s.addJob},
		{get, "/failedJobs", read, noBody, s.failedJobs},
	}
}

// routes builds the HTTP handler. Every route but the probes and /metrics
// needs a bearer token with a scope (when auth is configured): submit to
// create jobs, read to look, admin to change or delete what exists and to
// manage tokens. Outermost first: the concurrency cap, authentication, the
// caller's rate limit, the scope, the body limit. The console (package ui)
// is mounted at Config.UIBasePath: it logs users in with a cookie holding
// the same tokens and checks the same scopes itself.
func (s *Server) routes(m *httpx.Metrics) http.Handler {
	r := httpx.NewRouter(s.logger, m)
	r.Get("/healthz", httpx.Healthz)
	r.Get("/health", httpx.Healthz) // the originals' name (compat.go)
	r.Get("/readyz", httpx.Handler(s.readyz))
	r.Method(http.MethodGet, "/metrics", httpx.MetricsHandler(s.registry, s.logger))
	r.With(httpx.LimitConcurrency(s.cfg.MaxConcurrentRequests)).Mount(s.cfg.UIBasePath, s.console) // the console: its own login and scopes

	r.Group(func(r chi.Router) {
		r.Use(httpx.LimitConcurrency(s.cfg.MaxConcurrentRequests), httpx.Authenticate(s.authn, s.failures))
		if s.limiter != nil {
			r.Use(httpx.RateLimit(s.limiter))
		}
		limits := map[bodyLimit]func(http.Handler) http.Handler{
			bodyMax:  httpx.LimitBody(s.cfg.MaxBodyBytes),
			batchMax: httpx.LimitBody(s.cfg.MaxBatchBodyBytes),
		}
		for _, rt := range s.apiRoutes() {
			mw := []func(http.Handler) http.Handler{httpx.RequireScope(rt.scope)}
			if l := limits[rt.body]; l != nil {
				mw = append(mw, l)
			}
			r.With(mw...).Method(rt.method, rt.path, httpx.Handler(rt.handler))
		}
	})
	return r
}
