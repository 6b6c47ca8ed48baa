package submitter

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/otelx"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// List limits.
const (
	defaultListLimit = 50
	maxListLimit     = 1000
	// maxListBytes bounds the payloads, results and error texts of one
	// page of GET /jobs or GET /dlq: a thousand jobs of 1 MiB payloads
	// would otherwise make a 1 GiB answer, held in memory. A page cut
	// short by it carries next_cursor.
	maxListBytes = 8 << 20
)

// readyTimeout bounds the dependency checks of /readyz.
const readyTimeout = 2 * time.Second

// ---- submission ----

// submitJob handles POST /submit_job (POST /jobs is postJobs, compat.go).
func (s *Server) submitJob(w http.ResponseWriter, r *http.Request) error {
	p, err := s.decodeSingle(r)
	if err != nil {
		return err
	}
	resp, created, err := s.submitOne(w, r, p)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	httpx.WriteJSON(w, status, resp)
	return nil
}

// submitOne admits and inserts one validated job: the path every
// single-job route takes (the compatibility routes of compat.go too).
// created is false when an idempotency key matched an earlier job; a job
// created gets the warnings of its name (nameWarnings), which every
// route's answer carries.
func (s *Server) submitOne(w http.ResponseWriter, r *http.Request, p store.JobInsertParams) (resp wire.SubmitResponse, created bool, err error) {
	if err := s.checkJobNames(r.Context(), []store.JobInsertParams{p}, false); err != nil {
		return resp, false, err
	}
	if err := s.admit(w); err != nil {
		return resp, false, err
	}
	ctx, tp, end := traceSubmit(r, "dts.submit")
	defer func() { end(err) }()
	p.TraceParent = tp
	resps, n, err := s.insert(ctx, []store.JobInsertParams{p})
	if err != nil {
		return resp, false, err
	}
	resp = resps[0]
	if n > 0 {
		resp.Warnings = s.nameWarnings(r.Context(), []store.JobInsertParams{p}) // jobnames.go
	}
	return resp, n > 0, nil
}

// submitJobs handles POST /submit_jobs.
func (s *Server) submitJobs(w http.ResponseWriter, r *http.Request) (err error) {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	if r.Header.Get("Idempotency-Key") != "" {
		return httpx.InvalidField("Idempotency-Key header", "not supported on a batch; set idempotency_key on each job")
	}
	params, err := decodeBatch(body, s.cfg.MaxPayloadBytes)
	if err != nil {
		return err
	}
	if err := s.checkJobNames(r.Context(), params, true); err != nil {
		return err
	}
	if err := s.admit(w); err != nil {
		return err
	}
	ctx, tp, end := traceSubmit(r, "dts.submit_batch")
	defer func() { end(err) }()
	if tp != "" {
		for i := range params {
			params[i].TraceParent = tp
		}
	}
	resps, created, err := s.insert(ctx, params)
	if err != nil {
		return err
	}
	status := http.StatusOK // every job was an earlier one (a retried batch)
	if created > 0 {
		status = http.StatusCreated
	}
	for i := range resps {
		resps[i].Warnings = s.nameWarnings(ctx, params[i:i+1]) // jobnames.go
	}
	resp := wire.BatchSubmitResponse{Jobs: resps}
	if params[len(params)-1].Callback {
		resp.Jobs, resp.Callback = resps[:len(resps)-1], &resps[len(resps)-1]
	}
	httpx.WriteJSON(w, status, resp)
	return nil
}

// dueNow counts the jobs just created that are due at once (not delayed
// or scheduled for later): those join the backlog that admit bounds.
func dueNow(params []store.JobInsertParams, res []store.JobInsertResult) int {
	now, n := time.Now(), 0
	for i, r := range res {
		p := params[i]
		if r.Created && r.State == job.StatePending && p.Delay <= 0 && (p.RunAt == nil || !p.RunAt.After(now)) {
			n++
		}
	}
	return n
}

// admit refuses a submission while the due jobs are at Config.MaxBacklog
// (backlogGuard). It runs after validation, so bad input still gets its
// 4xx, and before any write.
func (s *Server) admit(w http.ResponseWriter) error {
	if s.backlog.admit() {
		return nil
	}
	s.metrics.backlogFull.Inc()
	w.Header().Set("Retry-After", "1")
	return httpx.Errorf(http.StatusServiceUnavailable, wire.CodeBacklogFull,
		"%d or more jobs are waiting for a worker (max_backlog); retry later", s.cfg.MaxBacklog)
}

// insert creates the jobs in one statement, answers each with its id and
// state (an earlier job's for a matching idempotency key), and wakes the
// coordinator if anything was created. A single job shares its statement
// with concurrent submissions (insertBatcher).
func (s *Server) insert(ctx context.Context, params []store.JobInsertParams) ([]wire.SubmitResponse, int, error) {
	mark := s.backlog.mark()
	var res []store.JobInsertResult
	var err error
	ictx, end := traceInsert(ctx, params)
	if len(params) == 1 && len(params[0].DependsOn) == 0 {
		var r store.JobInsertResult
		r, err = s.inserts.Insert(ictx, params[0])
		res = []store.JobInsertResult{r}
	} else {
		res, err = s.store.JobInsert(ictx, params)
	}
	end(err)
	var unknown *store.UnknownJobsError
	if errors.As(err, &unknown) {
		ids := make([]string, len(unknown.IDs))
		for i, id := range unknown.IDs {
			ids[i] = formatID(id)
		}
		return nil, 0, httpx.Errorf(http.StatusBadRequest, wire.CodeUnknownDependency,
			"depends_on: no job with id %s", strings.Join(ids, ", "))
	}
	if err != nil {
		return nil, 0, s.storeError(storeOpInsert, err)
	}
	out := make([]wire.SubmitResponse, len(res))
	var existing []int64
	created, limited, names := 0, false, []string{}
	debug := s.logger.Enabled(ctx, slog.LevelDebug)
	for i, r := range res {
		out[i] = wire.SubmitResponse{JobID: formatID(r.ID), Status: string(cmp.Or(r.State, job.StatePending))}
		if r.Created {
			created++
			limited = limited || r.Limited
			if names != nil && !slices.Contains(names, params[i].Name) {
				names = append(names, params[i].Name)
				if len(names) > wire.MaxWakeNames {
					names = nil // any name
				}
			}
		} else {
			existing = append(existing, r.ID)
		}
		if debug {
			s.logger.DebugContext(ctx, "job submitted", "job_id", r.ID, "name", params[i].Name, "created", r.Created)
		}
	}
	s.metrics.submitted.Add(float64(created))
	s.backlog.accepted(dueNow(params, res), mark)
	s.metrics.deduplicated.Add(float64(len(existing)))
	if created > 0 {
		slices.Sort(names)
		s.wakeSubmitted(wire.Wake{Limited: limited, Names: names})
	}
	if len(existing) == 0 {
		return out, created, nil
	}
	states, err := s.store.JobStateGetMany(ctx, existing)
	if err != nil {
		return nil, 0, s.storeError(storeOpStateGet, err)
	}
	for i, r := range res {
		if r.Created {
			continue
		}
		st, ok := states[r.ID]
		if !ok { // removed by retention since the insert
			return nil, 0, httpx.Errorf(http.StatusConflict, wire.CodeConflict,
				"the earlier job with this idempotency or unique key (%d) was just deleted; retry", r.ID)
		}
		out[i].Status = string(st)
	}
	return out, created, nil
}

// ---- reading ----

// getJob handles GET /jobs/{id}.
func (s *Server) getJob(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	j, err := s.svc.JobGet(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, j)
	return nil
}

// listJobs handles GET /jobs?status=&name=&queue=&limit=&cursor=.
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := store.JobListParams{Name: q.Get("name"), Queue: q.Get("queue"), State: job.State(q.Get("status"))}
	var err error
	if p.Limit, p.Before, err = queryPage(r); err != nil {
		return err
	}
	resp, err := s.svc.JobList(r.Context(), p)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// listDead handles GET /dlq?queue=&limit=&cursor=.
func (s *Server) listDead(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	resp, err := s.svc.DeadList(r.Context(), q.Get("queue"), limit, q.Get("cursor"))
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// A DLQ cursor is "<finished_at in Unix microseconds>-<id>": the DLQ is
// ordered by failure time, which PostgreSQL keeps to the microsecond.
func formatDeadCursor(c store.DeadCursor) string {
	return strconv.FormatInt(c.FinishedAt.UnixMicro(), 10) + "-" + formatID(c.ID)
}

func parseDeadCursor(s string) (*store.DeadCursor, error) {
	at, id, ok := strings.Cut(s, "-")
	if !ok {
		return nil, errors.New("not a DLQ cursor")
	}
	micros, err := parseID(at)
	if err != nil {
		return nil, err
	}
	n, err := parseID(id)
	if err != nil {
		return nil, err
	}
	return &store.DeadCursor{FinishedAt: time.UnixMicro(micros), ID: n}, nil
}

// stats handles GET /stats.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) error {
	resp, err := s.svc.Stats(r.Context())
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// ---- state changes ----

// cancelJob handles POST /jobs/{id}/cancel (admin; audited).
func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	done, err := s.audit(r.Context(), store.AuditJobCancel, store.AuditTargetJob, formatID(id))
	if err != nil {
		return err
	}
	res, err := s.store.JobCancel(r.Context(), id)
	if err != nil {
		done(failure(err))
		return s.storeError(storeOpCancel, err)
	}
	if res.State != job.StateLeased {
		done(map[string]any{"result": "ok", "state": string(res.State)})
		httpx.WriteJSON(w, http.StatusOK, wire.SubmitResponse{JobID: formatID(id), Status: string(res.State)})
		return nil
	}
	done(map[string]any{"result": "ok", "state": string(job.StateLeased), "cancel_requested": true, "worker_id": res.WorkerID})
	// The request is recorded: whatever the attempt's outcome, the job ends
	// canceled. Telling the worker only makes it stop sooner.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), bestEffortTimeout)
	defer cancel()
	ctl := wire.Control{Op: wire.OpCancel, JobID: id, LeaseToken: res.LeaseToken, Reason: job.ReasonCanceled}
	if err := s.queue.SendControl(ctx, res.WorkerID, ctl); err != nil {
		s.metrics.countRedisError(redisOpSendControl)
		s.logger.WarnContext(ctx, "send cancel to worker", "job_id", id, "worker_id", res.WorkerID, "error", err)
	}
	httpx.WriteJSON(w, http.StatusAccepted, wire.SubmitResponse{JobID: formatID(id), Status: string(job.StateLeased), CancelRequested: true})
	return nil
}

// requeueDead handles POST /dlq/{id}/requeue (admin; audited). The body
// is optional: {"payload": ...} replaces the job's payload.
func (s *Server) requeueDead(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	var req wire.RequeueRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeObject(body, &req); err != nil {
			return err
		}
	}
	resp, err := s.svc.DeadRequeue(r.Context(), id, req.Payload)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// ---- health ----

// readyz handles GET /readyz: 200 when PostgreSQL and Redis answer within
// readyTimeout and the server is not shutting down.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	if s.stopping.Load() {
		return httpx.Errorf(http.StatusServiceUnavailable, wire.CodeNotReady, "shutting down")
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var pgErr, redisErr error
	wg.Go(func() { pgErr = s.store.Ping(ctx) })
	wg.Go(func() { redisErr = s.queue.Ping(ctx) })
	wg.Wait()
	var failed []string
	if pgErr != nil {
		s.metrics.countStoreError(storeOpPing)
		s.logger.WarnContext(ctx, "readiness: postgresql", "error", pgErr)
		failed = append(failed, "postgresql")
	}
	if redisErr != nil {
		s.metrics.countRedisError(redisOpPing)
		s.logger.WarnContext(ctx, "readiness: redis", "error", redisErr)
		failed = append(failed, "redis")
	}
	if len(failed) > 0 {
		return httpx.Errorf(http.StatusServiceUnavailable, wire.CodeNotReady, "not reachable: %s", strings.Join(failed, ", "))
	}
	httpx.WriteJSON(w, http.StatusOK, wire.StatusResponse{Status: "ok"})
	return nil
}

// ---- helpers ----

// storeError counts an unexpected store error; sentinels (not found,
// conflict) are answers, not errors. The error goes on to httpx.Classify.
func (s *Server) storeError(op storeOp, err error) error {
	if !errors.Is(err, job.ErrNotFound) && !errors.Is(err, job.ErrConflict) && !errors.Is(err, context.Canceled) {
		s.metrics.countStoreError(op)
	}
	return err
}

// pathID parses the {id} route parameter: a positive 64-bit integer.
func pathID(r *http.Request) (int64, error) {
	raw := chi.URLParam(r, "id")
	id, err := parseID(raw)
	if err != nil {
		return 0, httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "job id must be a positive integer, got %q", truncate(raw, 40))
	}
	return id, nil
}

// parseID parses a positive decimal int64 (digits only: no sign, no spaces).
func parseID(s string) (int64, error) {
	if s == "" || len(s) > 19 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errors.New("not a positive integer")
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, errors.New("not a positive integer")
	}
	return id, nil
}

func formatID(id int64) string { return strconv.FormatInt(id, 10) }

// queryPage parses ?limit= (queryLimit) and an id ?cursor= from a
// previous answer's next_cursor (0 when absent): the paging of every
// listing ordered by id, newest first.
func queryPage(r *http.Request) (limit int, before int64, err error) {
	if limit, err = queryLimit(r); err != nil {
		return 0, 0, err
	}
	if c := r.URL.Query().Get("cursor"); c != "" {
		if before, err = parseID(c); err != nil {
			return 0, 0, httpx.InvalidField("cursor", "not a cursor from next_cursor")
		}
	}
	return limit, before, nil
}

// decodeSingle reads and decodes the body of a single-job submission
// (/submit_job and the routes that take its body), with the
// Idempotency-Key header.
func (s *Server) decodeSingle(r *http.Request) (store.JobInsertParams, error) {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return store.JobInsertParams{}, err
	}
	return decodeSubmit(body, r.Header.Get("Idempotency-Key"), s.cfg.MaxPayloadBytes)
}

// queryLimit parses ?limit=, 1..maxListLimit, default defaultListLimit.
func queryLimit(r *http.Request) (int, error) {
	raw := r.URL.Query().Get("limit")
	if raw == "" {
		return defaultListLimit, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > maxListLimit {
		return 0, httpx.InvalidField("limit", "must be an integer between 1 and %d", maxListLimit)
	}
	return n, nil
}

func statesList() string {
	names := make([]string, len(job.States))
	for i, st := range job.States {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// jobView is a job as the API shows it.
func jobView(j *job.Job) wire.Job {
	v := wire.Job{
		JobID:           formatID(j.ID),
		Name:            j.Name,
		Queue:           j.Queue,
		Priority:        j.Priority,
		Payload:         j.Payload,
		Status:          string(j.State),
		Attempts:        j.Attempts,
		MaxRetries:      j.MaxRetries,
		TimeoutSeconds:  j.TimeoutSeconds,
		LastError:       optString(j.LastError),
		Errors:          make([]wire.AttemptError, len(j.Errors)),
		Result:          j.Result,
		WorkerID:        optString(j.WorkerID),
		CreatedAt:       j.CreatedAt.UTC(),
		StartedAt:       optTime(j.StartedAt),
		FinishedAt:      optTime(j.FinishedAt),
		NextRunAt:       optTime(&j.NextRunAt),
		CancelRequested: j.CancelRequest,
		Progress:        j.Progress,
		ProgressMessage: optString(j.ProgressMessage),
		LimitKey:        j.LimitKey,
		TraceID:         otelx.TraceID(j.TraceParent),
	}
	if len(v.Payload) == 0 {
		v.Payload = []byte("null")
	}
	for i, e := range j.Errors {
		v.Errors[i] = wire.AttemptError{Attempt: e.Attempt, Error: e.Error, Reason: e.Reason, WorkerID: e.WorkerID, At: e.At.UTC(),
			LeaseToken: formatToken(e.LeaseToken), StartedAt: optTime(e.StartedAt), LeaseExtensions: e.Extensions,
			NextState: string(e.NextState), RetryAt: optTime(e.RetryAt)}
	}
	return v
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optTime(t *time.Time) *time.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
