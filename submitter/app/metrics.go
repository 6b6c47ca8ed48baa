package app

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the submitter's own metrics beside the HTTP ones of httpx.
// No label carries user input (job names are unbounded), so cardinality is
// fixed by the code.
type metrics struct {
	submitted    prometheus.Counter
	deduplicated prometheus.Counter
	wakeErrors   prometheus.Counter
	insertRows   prometheus.Histogram
	backlogFull  prometheus.Counter
	storeErrors  *prometheus.CounterVec
	redisErrors  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		submitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dts_jobs_submitted_total",
			Help: "Jobs created through the API.",
		}),
		deduplicated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dts_jobs_deduplicated_total",
			Help: "Submissions answered with an earlier job because their idempotency key matched.",
		}),
		wakeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dts_submit_wake_errors_total",
			Help: "Wake-ups to the coordinator that failed to publish (dispatch then waits for its next poll).",
		}),
		insertRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dts_submit_insert_rows",
			Help:    "Single-job submissions per INSERT: concurrent ones share a statement and a commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		backlogFull: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dts_submit_backlog_full_total",
			Help: "Submission requests refused (503 backlog_full) because the due jobs reached MAX_BACKLOG.",
		}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dts_store_errors_total",
			Help: "Unexpected PostgreSQL errors, by operation.",
		}, []string{"op"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dts_redis_errors_total",
			Help: "Redis errors, by operation.",
		}, []string{"op"}),
	}
	reg.MustRegister(m.submitted, m.deduplicated, m.wakeErrors, m.insertRows, m.backlogFull, m.storeErrors, m.redisErrors)
	// Export every series from the start, so that rate() sees the first error.
	for _, op := range storeOps {
		m.storeErrors.WithLabelValues(string(op))
	}
	for _, op := range redisOps {
		m.redisErrors.WithLabelValues(string(op))
	}
	return m
}

// storeOp is the op label of dts_store_errors_total: which PostgreSQL
// operation failed. Every value is a constant below, listed in storeOps,
// so that newMetrics creates its series at zero (TestOpLabelsPreCreated).
type storeOp string

const (
	storeOpInsert      storeOp = "insert"
	storeOpStateGet    storeOp = "state_get"
	storeOpGet         storeOp = "get"
	storeOpList        storeOp = "list"
	storeOpDeadList    storeOp = "dead_list"
	storeOpStats       storeOp = "stats"
	storeOpLeader      storeOp = "leader"
	storeOpCancel      storeOp = "cancel"
	storeOpRequeue     storeOp = "requeue"
	storeOpPing        storeOp = "ping"
	storeOpAudit       storeOp = "audit"
	storeOpAuditList   storeOp = "audit_list"
	storeOpTokenCreate storeOp = "token_create"
	storeOpTokenList   storeOp = "token_list"
	storeOpTokenRevoke storeOp = "token_revoke"
	storeOpDelete      storeOp = "delete"
	storeOpBulk        storeOp = "bulk"
	storeOpWorkers     storeOp = "workers"
	storeOpJobTypes    storeOp = "job_types"
	storeOpRollup      storeOp = "rollup"
	// schedule_read: GET /schedules and /schedules/{id}; schedule_write:
	// create, pause, resume, delete and trigger.
	storeOpScheduleRead  storeOp = "schedule_read"
	storeOpScheduleWrite storeOp = "schedule_write"

	storeOpOperation  storeOp = "operation"
	storeOpDrain      storeOp = "drain"
	storeOpScheduled  storeOp = "scheduled"
	storeOpRunNow     storeOp = "run_now"
	storeOpQueues     storeOp = "queues"
	storeOpQueueWrite storeOp = "queue_write"
	storeOpLimits     storeOp = "limits"
	storeOpLimitWrite storeOp = "limit_write"
)

// redisOp is the op label of dts_redis_errors_total: which Redis operation
// failed. Every value is a constant below, listed in redisOps.
type redisOp string

const (
	redisOpWake        redisOp = "wake"
	redisOpSendControl redisOp = "send_control"
	redisOpPing        redisOp = "ping"
)

var (
	storeOps = []storeOp{storeOpInsert, storeOpStateGet, storeOpGet, storeOpList, storeOpDeadList, storeOpStats, storeOpLeader, storeOpCancel, storeOpRequeue, storeOpPing, storeOpAudit, storeOpAuditList, storeOpTokenCreate, storeOpTokenList, storeOpTokenRevoke, storeOpDelete, storeOpBulk, storeOpWorkers, storeOpJobTypes, storeOpRollup, storeOpScheduleRead, storeOpScheduleWrite,
		storeOpOperation, storeOpDrain, storeOpScheduled, storeOpRunNow, storeOpQueues, storeOpQueueWrite, storeOpLimits, storeOpLimitWrite}
	redisOps = []redisOp{redisOpWake, redisOpSendControl, redisOpPing}
)

// countStoreError counts a failed PostgreSQL operation.
func (m *metrics) countStoreError(op storeOp) { m.storeErrors.WithLabelValues(string(op)).Inc() }

// countRedisError counts a failed Redis operation.
func (m *metrics) countRedisError(op redisOp) { m.redisErrors.WithLabelValues(string(op)).Inc() }
