// Package app is the submitter's application: what the JSON API
// (submitter/api) and the console (submitter/ui) both call to read and
// change jobs. It validates what a front end cannot (filters, limits,
// payloads of requeues), runs the store, counts store errors, writes the
// audit row of every action with the acting principal (from ctx,
// httpx.PrincipalFrom) and wakes the coordinator.
//
// Why it is shaped this way: the two front ends only decode requests and
// present answers, so validation, error counting and the audit log are
// one code path whichever front end acts. Errors are the API's
// (*httpx.Error, the job sentinels), so each front end only decides how to
// show them. App reaches PostgreSQL through Store and Redis through Queue,
// the narrow interfaces declared here, and runs its background parts (the
// insert batcher, the backlog guard, the bulk operations and the
// wake-ups) as startstop services between Start and Stop.
//
// What must stay true:
//   - A submission is answered only after the commit of its row
//     (insertBatcher); the wake-up published afterwards is best effort and
//     never fails a request.
//   - App never changes a leased job's state itself: cancel records the
//     request in PostgreSQL and asks the job's worker to stop.
//   - Every admin action writes its audit row before it acts (audit).
//   - No metric label carries user input.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// Store is what the application reads and writes in PostgreSQL
// (*store.Store implements it).
type Store interface {
	Ping(ctx context.Context) error
	StatsGet(ctx context.Context) (store.Stats, error)
	LeaderGet(ctx context.Context) (int64, string, error)
	RollupRange(ctx context.Context, since time.Time) ([]store.RollupRow, error)

	JobInsert(ctx context.Context, params []store.JobInsertParams) ([]store.JobInsertResult, error)
	JobStateGetMany(ctx context.Context, ids []int64) (map[int64]job.State, error)
	JobCountDue(ctx context.Context, limit int64) (int64, error)
	JobGet(ctx context.Context, id int64) (*job.Job, error)
	JobGetByKey(ctx context.Context, key string) (*job.Job, error)
	JobList(ctx context.Context, p store.JobListParams) ([]*job.Job, int64, error)
	JobSearch(ctx context.Context, p store.JobSearchParams) (store.JobSearchResult, error)
	JobListScheduled(ctx context.Context, limit int, after *store.ScheduledCursor) ([]*job.Job, *store.ScheduledCursor, error)
	JobTimelineGet(ctx context.Context, id int64) (*job.Job, []job.Event, error)
	JobLogsGet(ctx context.Context, jq store.JobLogsQuery) ([]store.JobLogLine, []store.JobLogDrop, error)
	JobCancel(ctx context.Context, id int64) (store.CancelResult, error)
	JobRunNow(ctx context.Context, id int64) error
	JobDelete(ctx context.Context, id int64) (job.State, error)
	JobRequeueDead(ctx context.Context, id int64, payload json.RawMessage) error
	JobBulkCount(ctx context.Context, p store.JobBulkParams, skipRequested bool) (int64, error)
	JobBulkCancel(ctx context.Context, p store.JobBulkParams) (int64, []store.LeasedCancel, error)
	JobBulkRequeue(ctx context.Context, p store.JobBulkParams) (int64, error)
	JobBulkDelete(ctx context.Context, p store.JobBulkParams) (int64, error)

	DeadListPage(ctx context.Context, p store.DeadListParams) ([]store.DeadJob, *store.DeadCursor, error)
	DeadGroups(ctx context.Context, limit int) (store.DeadGroups, error)

	QueueStatsList(ctx context.Context) ([]store.QueueStats, error)
	QueueSetPaused(ctx context.Context, name string, paused bool) (store.QueueSetting, error)
	QueueSetConcurrency(ctx context.Context, name string, n int) (store.QueueSetting, error)
	LimitList(ctx context.Context) ([]store.Limit, error)
	LimitSet(ctx context.Context, l store.Limit) (store.Limit, error)
	LimitDelete(ctx context.Context, key string) error

	WorkerList(ctx context.Context) ([]store.WorkerRow, error)
	WorkerGet(ctx context.Context, id string) (store.WorkerRow, error)
	WorkerLeasedJobs(ctx context.Context) (map[string][]int64, error)
	WorkerJobTypes(ctx context.Context) ([]string, error)
	WorkerDrain(ctx context.Context, id, actor string) (store.WorkerRow, error)
	WorkerUndrain(ctx context.Context, id string) (store.WorkerRow, error)

	ScheduleInsert(ctx context.Context, p store.ScheduleInsertParams) (*store.Schedule, error)
	ScheduleGet(ctx context.Context, id int64) (*store.Schedule, error)
	ScheduleList(ctx context.Context, limit int, before int64) ([]*store.Schedule, int64, error)
	SchedulePause(ctx context.Context, id int64) (*store.Schedule, error)
	ScheduleResume(ctx context.Context, id int64, next func(after time.Time) time.Time) (*store.Schedule, error)
	ScheduleDelete(ctx context.Context, id int64) (*store.Schedule, error)
	ScheduleTrigger(ctx context.Context, id int64) (int64, error)

	OperationCount(ctx context.Context, action string, f store.OperationFilter) (int64, error)
	OperationCreate(ctx context.Context, p store.OperationCreateParams) (store.Operation, error)
	OperationGet(ctx context.Context, id int64) (store.Operation, error)
	OperationList(ctx context.Context, limit int) ([]store.Operation, error)
	OperationCancel(ctx context.Context, id int64, actor string) (store.Operation, error)
	OperationStep(ctx context.Context, id int64, owner string, lease time.Duration, batch int) (store.OperationStepResult, error)
	OperationFail(ctx context.Context, id int64, owner, reason string) error
	OperationClaimStale(ctx context.Context, owner string, lease time.Duration) (o store.Operation, ok bool, err error)
	OperationRelease(ctx context.Context, owner string) error

	AuditInsert(ctx context.Context, e store.AuditEntry) (int64, error)
	AuditSetOutcome(ctx context.Context, id int64, outcome map[string]any) error
	AuditList(ctx context.Context, limit int, before int64) (entries []store.AuditEntry, next int64, err error)
	tokenStore
}

// tokenStore is what TokenAdmin writes: API keys.
type tokenStore interface {
	APIKeyInsert(ctx context.Context, p store.APIKeyInsertParams) (auth.APIKey, error)
	APIKeyList(ctx context.Context) ([]auth.APIKey, error)
	APIKeyRevoke(ctx context.Context, id int64, actor string) (auth.APIKey, error)
}

// Queue is what the application sends over Redis (*queue.Queue
// implements it): wake-ups to the coordinator and cancel commands to
// workers, both best effort.
type Queue interface {
	Ping(ctx context.Context) error
	Wake(ctx context.Context, w wire.Wake) error
	SendControl(ctx context.Context, workerID string, c wire.Control) error
}

// The store's parameter types that the front ends fill in; App takes them
// as they are.
type (
	JobInsertParams      = store.JobInsertParams
	JobListParams        = store.JobListParams
	Unique               = store.Unique
	ScheduleInsertParams = store.ScheduleInsertParams
	ScheduleJob          = store.ScheduleJob
)

// Config configures an App. The submitter's Config holds the defaults.
type Config struct {
	// MaxPayloadBytes limits a payload a dead job is requeued with.
	MaxPayloadBytes int
	// MaxBacklog bounds the due jobs; 0: no bound (backlogGuard).
	MaxBacklog int64
	// BacklogCheckInterval is how often the due jobs are counted.
	BacklogCheckInterval time.Duration
	// RejectUnknownJobNames refuses submissions of names no worker
	// handles (CheckJobNames).
	RejectUnknownJobNames bool
}

// App is the submitter's application. New builds it; Start starts its
// background parts and Stop stops them.
type App struct {
	cfg     Config
	logger  *slog.Logger
	store   Store
	queue   Queue
	metrics *metrics
	tokens  *TokenAdmin
	inserts *insertBatcher // single submissions, coalesced
	backlog *backlogGuard  // admission control (Config.MaxBacklog)
	names   *jobNames      // Config.RejectUnknownJobNames and the submissions' warnings
	ops     *opRunner      // background bulk operations (operations.go)
	changed func()         // told of every change (the console's live pages); may be nil

	wakeCh chan struct{} // capacity 1: a wake-up is pending
	wakeMu sync.Mutex
	// wakeNext is what the pending wake-up says (wire.Wake, merged over
	// the requests since the last one); nil once published.
	wakeNext *wire.Wake
	waker    *startstop.Func // publishes the wake-ups (runWaker)

	// services are the background parts, in the order Stop stops them.
	services []startstop.Service
}

// New builds an App over st and q, registering its metrics with reg.
// Nothing runs until Start.
func New(st Store, q Queue, reg prometheus.Registerer, cfg Config, logger *slog.Logger) *App {
	a := &App{cfg: cfg, logger: logger, store: st, queue: q, metrics: newMetrics(reg), tokens: &TokenAdmin{store: st}}
	a.inserts = newInsertBatcher(st.JobInsert, insertFlushers, maxInsertRows, insertTimeout,
		func(n int) { a.metrics.insertRows.Observe(float64(n)) })
	a.names = newJobNames(st.WorkerJobTypes)
	a.backlog = newBacklogGuard(st.JobCountDue, cfg.MaxBacklog, cfg.BacklogCheckInterval, logger)
	a.ops = newOpRunner(a)
	a.wakeCh = make(chan struct{}, 1)
	a.waker = startstop.NewFunc(a.runWaker)
	// The requests' helpers stop after the HTTP server (the submitter shuts
	// it down first); the waker last, so that it publishes their last
	// wake-up.
	a.services = []startstop.Service{a.ops, a.inserts, a.backlog, a.waker}
	return a
}

// OnChange sets what is told of every change that wakes the coordinator
// (the console's live pages). Call it before Start.
func (a *App) OnChange(f func()) { a.changed = f }

// Start starts the background parts: the bulk operations, the insert
// batcher, the backlog guard and the wake-ups. They run until Stop, not
// until ctx ends.
func (a *App) Start(ctx context.Context) error {
	return startstop.StartAll(context.WithoutCancel(ctx), a.services...)
}

// Stop stops the background parts, in order. Call it after the HTTP
// server has shut down.
func (a *App) Stop() { startstop.StopAll(a.services...) }

// Ready pings PostgreSQL and Redis at once and names those that failed to
// answer ("postgresql", "redis"); nil when both did.
func (a *App) Ready(ctx context.Context) []string {
	var wg sync.WaitGroup
	var pgErr, redisErr error
	wg.Go(func() { pgErr = a.store.Ping(ctx) })
	wg.Go(func() { redisErr = a.queue.Ping(ctx) })
	wg.Wait()
	var failed []string
	if pgErr != nil {
		a.metrics.countStoreError(storeOpPing)
		a.logger.WarnContext(ctx, "readiness: postgresql", "error", pgErr)
		failed = append(failed, "postgresql")
	}
	if redisErr != nil {
		a.metrics.countRedisError(redisOpPing)
		a.logger.WarnContext(ctx, "readiness: redis", "error", redisErr)
		failed = append(failed, "redis")
	}
	return failed
}

// bestEffortTimeout bounds the Redis calls made after PostgreSQL has
// committed (wake-up, cancel control).
const bestEffortTimeout = time.Second

// storeError counts an unexpected store error; sentinels (not found,
// conflict) are answers, not errors. The error goes on to httpx.Classify.
func (a *App) storeError(op storeOp, err error) error {
	if !errors.Is(err, job.ErrNotFound) && !errors.Is(err, job.ErrConflict) && !errors.Is(err, context.Canceled) {
		a.metrics.countStoreError(op)
	}
	return err
}

// wake asks the waker goroutine to tell the coordinator that jobs are due,
// without waiting: a submission's answer never waits for Redis. Requests
// made while a wake-up is pending share it, so a burst of submissions
// costs a few PUBLISHes, and each submission is followed by a PUBLISH that
// starts after its INSERT committed.
//
// The wake-up is limited (queue.Wake): the jobs made due may have a
// limit_key. That is what every operator action says (requeues, run now,
// a resumed queue, a changed limit): they are rare, and a limited wake-up
// that was not needed costs only the leader's limited claim, finding
// nothing, in its rounds until it next checks for limited jobs (a poll
// interval). Submissions say what they know (wakeSubmitted).
func (a *App) wake() { a.wakeSubmitted(wire.Wake{Limited: true}) }

// wakeSubmitted is wake for submitted jobs; w says what the submission
// knows of them: whether some were created with a limit_key
// (store.JobInsertResult.Limited) and their names.
func (a *App) wakeSubmitted(w wire.Wake) {
	if a.changed != nil {
		a.changed()
	}
	a.wakeMu.Lock() // before the signal: the PUBLISH that takes it reads it
	if a.wakeNext != nil {
		w = a.wakeNext.Merge(w)
	}
	a.wakeNext = &w
	a.wakeMu.Unlock()
	select {
	case a.wakeCh <- struct{}{}:
	default: // one is pending already and will start after our commit
	}
}

// runWaker publishes the wake-ups that wake requests. Best effort: a
// failure is counted and logged at debug, and the coordinator's poll picks
// the jobs up anyway.
func (a *App) runWaker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			select {
			case <-a.wakeCh: // the last requests' wake-up, on the way out
				a.publishWake(context.WithoutCancel(ctx))
			default:
			}
			return
		case <-a.wakeCh:
			a.publishWake(ctx)
		}
	}
}

func (a *App) publishWake(ctx context.Context) {
	a.wakeMu.Lock()
	w := a.wakeNext
	a.wakeNext = nil
	a.wakeMu.Unlock()
	if w == nil {
		return // an earlier PUBLISH took this request's wake-up
	}
	pctx, cancel := context.WithTimeout(ctx, bestEffortTimeout)
	defer cancel()
	if err := a.queue.Wake(pctx, *w); err != nil && ctx.Err() == nil {
		a.metrics.wakeErrors.Inc()
		a.metrics.countRedisError(redisOpWake)
		a.logger.DebugContext(ctx, "wake coordinator", "error", err)
	}
}
