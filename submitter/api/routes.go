package api

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

// routes is the JSON API, every route in one table. The probes, the
// metrics and the console are the submitter's (Register leaves them out).
func (h *API) routes() []route {
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
		// Submission (jobs.go).
		{post, "/submit_job", submit, bodyMax, h.submitJob},
		{post, "/jobs", submit, bodyMax, h.postJobs},
		{post, "/submit_jobs", submit, batchMax, h.submitJobs},

		// Jobs (jobs.go, logs.go, operations.go).
		{get, "/jobs", read, noBody, h.listJobs},
		{get, "/jobs/scheduled", read, noBody, h.listScheduled},
		{get, "/jobs/{id}", read, noBody, h.getJob},
		{get, "/jobs/{id}/timeline", read, noBody, h.getJobTimeline},
		{get, "/jobs/{id}/logs", read, noBody, h.getJobLogs},
		{post, "/jobs/{id}/cancel", admin, bodyMax, h.cancelJob},
		{post, "/jobs/{id}/run_now", admin, bodyMax, h.runNow},
		{del, "/jobs/{id}", admin, noBody, h.deleteJob},
		{post, "/jobs/bulk", admin, bodyMax, h.bulkJobs},

		// Dead letters, stats (dlq.go).
		{get, "/dlq", read, noBody, h.listDead},
		{post, "/dlq/{id}/requeue", admin, bodyMax, h.requeueDead},
		{get, "/stats", read, noBody, h.stats},

		// Workers (workers.go).
		{get, "/workers", read, noBody, h.listWorkers},
		{get, "/workers/{id}", read, noBody, h.getWorker},
		{post, "/workers/{id}/drain", admin, bodyMax, h.drainWorker},
		{post, "/workers/{id}/undrain", admin, bodyMax, h.undrainWorker},

		// Bulk operations (operations.go).
		{get, "/operations", read, noBody, h.listOperations},
		{get, "/operations/{id}", read, noBody, h.getOperation},
		{post, "/operations/{id}/cancel", admin, bodyMax, h.cancelOperation},

		// Schedules (schedules.go).
		{get, "/schedules", read, noBody, h.listSchedules},
		{get, "/schedules/{id}", read, noBody, h.getSchedule},
		{post, "/schedules", admin, bodyMax, h.createSchedule},
		{post, "/schedules/{id}/pause", admin, bodyMax, h.pauseSchedule},
		{post, "/schedules/{id}/resume", admin, bodyMax, h.resumeSchedule},
		{post, "/schedules/{id}/trigger", admin, bodyMax, h.triggerSchedule},
		{del, "/schedules/{id}", admin, noBody, h.deleteSchedule},

		// Queues (queues.go).
		{get, "/queues", read, noBody, h.listQueues},
		{post, "/queues/{name}/pause", admin, bodyMax, h.pauseQueue},
		{post, "/queues/{name}/resume", admin, bodyMax, h.resumeQueue},
		{put, "/queues/{name}", admin, bodyMax, h.updateQueue},
		{post, "/queues/{name}", admin, bodyMax, h.updateQueue},

		// Limits (limits.go).
		{get, "/limits", read, noBody, h.listLimits},
		{put, "/limits/{key}", admin, bodyMax, h.putLimit},
		{del, "/limits/{key}", admin, noBody, h.deleteLimit},

		// Tokens and the audit log (admin.go).
		{post, "/admin/tokens", admin, bodyMax, h.createToken},
		{get, "/admin/tokens", admin, noBody, h.listTokens},
		{del, "/admin/tokens/{id}", admin, noBody, h.revokeToken},
		{get, "/admin/audit", admin, noBody, h.listAudit},

		// The originals' routes (compat.go).
		{post, "/api/tasks", submit, bodyMax, h.createTask},
		{get, "/api/tasks/{id}", read, noBody, h.getTask},
		{post, "/addJob", submit, bodyMax, h.addJob},
		{get, "/failedJobs", read, noBody, h.failedJobs},
	}
}

// Register adds the JSON API to r. Every route needs a bearer token with
// a scope (when auth is configured): submit to create jobs, read to look,
// admin to change or delete what exists and to manage tokens. Outermost
// first: the concurrency cap, authentication, the caller's rate limit,
// the scope, the body limit.
func (h *API) Register(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(httpx.LimitConcurrency(h.cfg.MaxConcurrentRequests), httpx.Authenticate(h.cfg.Authn, h.cfg.Failures))
		if h.cfg.Limiter != nil {
			r.Use(httpx.RateLimit(h.cfg.Limiter))
		}
		budget := httpx.NewBodyBudget(h.cfg.MaxInflightBodyBytes) // shared by every route with a body
		limits := map[bodyLimit]func(http.Handler) http.Handler{
			bodyMax:  budget.LimitBody(h.cfg.MaxBodyBytes),
			batchMax: budget.LimitBody(h.cfg.MaxBatchBodyBytes),
		}
		for _, rt := range h.routes() {
			mw := []func(http.Handler) http.Handler{httpx.RequireScope(rt.scope)}
			if l := limits[rt.body]; l != nil {
				mw = append(mw, l)
			}
			r.With(mw...).Method(rt.method, rt.path, httpx.Handler(rt.handler))
		}
	})
}
