package coordinator

import (
	"cmp"
	"context"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dtsched/dts/coordinator/internal/registry"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// metrics are the coordinator's own; names of the original system's
// dashboard (jobs_total, workers_active, jobs_in_queue, jobs_in_dlq,
// job_processing_duration_seconds, job_retry_attempts,
// dts_lease_timeouts_total) are kept so that dashboard keeps working.
// docs/observability.md lists every metric.
type metrics struct {
	jobsTotal          *prometheus.CounterVec   // status: completed, failed, timeout
	processing         *prometheus.HistogramVec // name
	retryAttempts      *prometheus.HistogramVec // reason
	leaseTimeouts      prometheus.Counter
	attempts           *prometheus.CounterVec // name, outcome: succeeded, failed, released
	dispatched         *prometheus.CounterVec // name
	queueWait          *prometheus.HistogramVec
	endToEnd           *prometheus.HistogramVec
	staleResults       prometheus.Counter
	badMessages        *prometheus.CounterVec // stream
	reclaimed          *prometheus.CounterVec // reason
	deadLettered       prometheus.Counter
	deadMirrorRebuilds prometheus.Counter
	isLeader           prometheus.Gauge
	leaderEpoch        prometheus.Gauge
	leaderChanges      prometheus.Counter
	storeErrors        *prometheus.CounterVec // op
	redisErrors        *prometheus.CounterVec // op
	cleaned            prometheus.Counter
	claimBatch         prometheus.Histogram
	resultBatch        prometheus.Histogram
	dispatchStep       *prometheus.HistogramVec // step: claim, deliver
	reaperSkipped      prometheus.Counter
	heartbeatResets    *prometheus.CounterVec // cause: clock_backwards, ids_backwards
	scheduleTicks      *prometheus.CounterVec // outcome: enqueued, skipped, missed
	queuesConfigured   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	durBuckets := []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	latBuckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	m := &metrics{
		jobsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jobs_total",
			Help: "Jobs processed by status: completed (succeeded), failed (moved to the DLQ), timeout (an attempt ran out of time)."}, []string{"status"}),
		processing: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "job_processing_duration_seconds",
			Help: "Run time of every finished attempt, as measured by its worker.", Buckets: durBuckets}, []string{"name"}),
		retryAttempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "job_retry_attempts",
			Help:    "Attempts a job had used when it was scheduled for retry or moved to the DLQ, by reason.",
			Buckets: []float64{0, 1, 2, 3, 4, 5, 10}}, []string{"reason"}),
		leaseTimeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "dts_lease_timeouts_total",
			Help: "Leases that ran out without being extended."}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dts_attempts_finished_total",
			Help: "Finished attempts by job type and outcome (succeeded, failed, released)."}, []string{"name", "outcome"}),
		dispatched: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dts_attempts_started_total",
			Help: "Attempts started (jobs leased and delivered to a worker) by job type."}, []string{"name"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "dts_queue_wait_seconds",
			Help: "Submit to start of the first attempt, as seen by the worker.", Buckets: latBuckets}, []string{"name"}),
		endToEnd: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "dts_end_to_end_seconds",
			Help: "Submit to the successful finish of a job.", Buckets: latBuckets}, []string{"name"}),
		staleResults: prometheus.NewCounter(prometheus.CounterOpts{Name: "dts_stale_results_total",
			Help: "Results rejected because their lease (fencing token) was no longer current."}),
		badMessages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dts_bad_messages_total",
			Help: "Undecodable messages dropped, by stream."}, []string{"stream"}),
		reclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dts_reclaimed_total",
			Help: "Leases taken back and their jobs made due again, by reason (worker_failure, lease_timeout, worker_stopped, delivery_failed)."}, []string{"reason"}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{Name: "dts_dead_lettered_total",
			Help: "Jobs moved to the dead-letter queue."}),
		deadMirrorRebuilds: prometheus.NewCounter(prometheus.CounterOpts{Name: "dts_dlq_mirror_rebuilds_total",
			Help: "Times the Redis dead-letter list was rebuilt from PostgreSQL."}),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "dts_coordinator_leader",
			Help: "1 while this coordinator is the leader, 0 while it stands by."}),
		leaderEpoch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "dts_coordinator_leader_epoch",
			Help: "The leader epoch this coordinator last held."}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "dts_coordinator_leader_changes_total",
			Help: "Times this coordinator became leader."}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dts_store_errors_total",
			Help: "PostgreSQL operations that failed, by operation."}, []string{"op"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dts_redis_errors_total",
			Help: "Redis operations that failed, by operation."}, []string{"op"}),
		cleaned: prometheus.NewCounter(prometheus.CounterOpts{Name: "dts_jobs_cleaned_total",
			Help: "Finished jobs deleted by the retention cleaner."}),
		claimBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dts_claim_batch_size",
			Help: "Jobs leased per claim statement.", Buckets: prometheus.ExponentialBuckets(1, 4, 7)}),
		resultBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dts_result_batch_size",
			Help: "Results applied per transaction.", Buckets: prometheus.ExponentialBuckets(1, 4, 7)}),
		dispatchStep: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "dts_dispatch_step_seconds",
			Help:    "Duration of each step of a dispatch round: the claim statement, the delivery to Redis.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}, []string{"step"}),
		reaperSkipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "dts_reaper_skipped_total",
			Help: "Reaper rounds that judged nobody because the heartbeat reader had not caught up (a paused or blocked leader, Redis unreadable)."}),
		heartbeatResets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dts_heartbeat_resets_total",
			Help: "Times the heartbeat reader gave every worker a fresh deadline because Redis's clock or the stream's ids went backwards."}, []string{"cause"}),
		scheduleTicks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dts_schedule_ticks_total",
			Help: "Ticks of periodic jobs by outcome: enqueued, skipped (overlap skip), missed (late beyond SCHEDULE_GRACE and not caught up)."}, []string{"outcome"}),
		queuesConfigured: prometheus.NewGauge(prometheus.GaugeOpts{Name: "dts_queues_configured",
			Help: "Queues paused or capped, as the leader's dispatcher last loaded them: while 0 and no worker names its queues, every claim is the plain one."}),
	}
	reg.MustRegister(m.queuesConfigured, m.jobsTotal, m.processing, m.retryAttempts, m.leaseTimeouts, m.attempts, m.dispatched,
		m.queueWait, m.endToEnd, m.staleResults, m.badMessages, m.reclaimed, m.deadLettered, m.deadMirrorRebuilds,
		m.isLeader, m.leaderEpoch, m.leaderChanges, m.storeErrors, m.redisErrors, m.cleaned, m.claimBatch, m.resultBatch,
		m.dispatchStep, m.reaperSkipped, m.heartbeatResets, m.scheduleTicks)
	for _, o := range []string{tickEnqueued, tickSkipped, tickMissed} {
		m.scheduleTicks.WithLabelValues(o)
	}
	for _, s := range []string{"completed", "failed", "timeout"} {
		m.jobsTotal.WithLabelValues(s)
	}
	for _, r := range []string{job.ReasonWorkerFailure, job.ReasonLeaseTimeout, job.ReasonMaxRetriesExceeded,
		job.ReasonTimeout, job.ReasonPermanent, "job_error"} {
		m.retryAttempts.WithLabelValues(r)
	}
	// Series that exist from the start, at zero, so dashboards and alerts
	// see a real 0 rather than no data.
	for _, r := range []string{job.ReasonWorkerFailure, job.ReasonLeaseTimeout, "worker_stopped", "delivery_failed"} {
		m.reclaimed.WithLabelValues(r)
	}
	for _, s := range []string{"results", "heartbeats"} {
		m.badMessages.WithLabelValues(s)
	}
	for _, op := range storeOps {
		m.storeErrors.WithLabelValues(string(op))
	}
	for _, op := range redisOps {
		m.redisErrors.WithLabelValues(string(op))
	}
	m.staleResults.Add(0)
	return m
}

// storeOp is the op label of dts_store_errors_total: which PostgreSQL
// operation failed. Every value is a constant below, listed in storeOps,
// so that newMetrics creates its series at zero (TestOpLabelsPreCreated).
type storeOp string

const (
	storeOpApplyResults          storeOp = "apply_results"
	storeOpClaim                 storeOp = "claim"
	storeOpCleanup               storeOp = "cleanup"
	storeOpCountDead             storeOp = "count_dead"
	storeOpDLQRebuild            storeOp = "dlq_rebuild"
	storeOpElect                 storeOp = "elect"
	storeOpLeaseExtend           storeOp = "lease_extend"
	storeOpLimitedWaiting        storeOp = "limited_waiting"
	storeOpListDead              storeOp = "list_dead"
	storeOpLoadLeases            storeOp = "load_leases"
	storeOpLoadWorkerCredentials storeOp = "load_worker_credentials"
	storeOpQueueSettings         storeOp = "queue_settings"
	storeOpQueueStats            storeOp = "queue_stats"
	storeOpReclaimExpired        storeOp = "reclaim_expired"
	storeOpReclaimWorker         storeOp = "reclaim_worker"
	storeOpRelease               storeOp = "release"
	storeOpReleaseWorker         storeOp = "release_worker"
	storeOpRenewLease            storeOp = "renew_lease"
	storeOpRollup                storeOp = "rollup"
	storeOpScheduleFire          storeOp = "schedule_fire"
	storeOpScheduleList          storeOp = "schedule_list"
	storeOpStaleEvents           storeOp = "stale_events"
	storeOpStats                 storeOp = "stats"
	storeOpSyncWorkers           storeOp = "sync_workers"
)

// redisOp is the op label of dts_redis_errors_total: which Redis operation
// failed. Every value is a constant below, listed in redisOps.
type redisOp string

const (
	redisOpDeliver          redisOp = "deliver"
	redisOpDLQLen           redisOp = "dlq_len"
	redisOpDLQPush          redisOp = "dlq_push"
	redisOpDLQRebuild       redisOp = "dlq_rebuild"
	redisOpDropWorkerQueues redisOp = "drop_worker_queues"
	redisOpHeartbeatRead    redisOp = "heartbeat_read"
	redisOpRemoveDeliveries redisOp = "remove_deliveries"
	redisOpResultsAck       redisOp = "results_ack"
	redisOpResultsGroup     redisOp = "results_group"
	redisOpResultsRead      redisOp = "results_read"
)

var (
	storeOps = []storeOp{storeOpApplyResults, storeOpClaim, storeOpCleanup, storeOpCountDead, storeOpDLQRebuild, storeOpElect, storeOpLeaseExtend, storeOpLimitedWaiting, storeOpListDead, storeOpLoadLeases, storeOpLoadWorkerCredentials, storeOpQueueSettings, storeOpQueueStats, storeOpReclaimExpired, storeOpReclaimWorker, storeOpRelease, storeOpReleaseWorker, storeOpRenewLease, storeOpRollup, storeOpScheduleFire, storeOpScheduleList, storeOpStaleEvents, storeOpStats, storeOpSyncWorkers}
	redisOps = []redisOp{redisOpDeliver, redisOpDLQLen, redisOpDLQPush, redisOpDLQRebuild, redisOpDropWorkerQueues, redisOpHeartbeatRead, redisOpRemoveDeliveries, redisOpResultsAck, redisOpResultsGroup, redisOpResultsRead}
)

// countStoreError counts a failed PostgreSQL operation.
func (m *metrics) countStoreError(op storeOp) { m.storeErrors.WithLabelValues(string(op)).Inc() }

// countRedisError counts a failed Redis operation.
func (m *metrics) countRedisError(op redisOp) { m.redisErrors.WithLabelValues(string(op)).Inc() }

// stateCollector reads depth and fleet gauges at scrape time: the DLQ and
// queue from PostgreSQL (the truth, so a standby reports them too), the
// fleet from the registry (only the leader has one).
type stateCollector struct {
	store     *store.Store
	registry  func() *registry.Registry
	queue     *prometheus.Desc
	dlq       *prometheus.Desc
	oldest    *prometheus.Desc
	byState   *prometheus.Desc
	workers   *prometheus.Desc
	inFlight  *prometheus.Desc
	freeSlots *prometheus.Desc
	hbAge     *prometheus.Desc
	unhandled *prometheus.Desc
	starved   *prometheus.Desc
	qDepth    *prometheus.Desc
	qOldest   *prometheus.Desc
	qRunning  *prometheus.Desc
	qPaused   *prometheus.Desc
	metrics   *metrics
}

func newStateCollector(s *store.Store, reg func() *registry.Registry, m *metrics) *stateCollector {
	return &stateCollector{
		store: s, registry: reg, metrics: m,
		queue:     prometheus.NewDesc("jobs_in_queue", "Jobs due to run and waiting for a worker (pending or retrying, due now).", nil, nil),
		dlq:       prometheus.NewDesc("jobs_in_dlq", "Jobs in the dead-letter queue (failed).", nil, nil),
		oldest:    prometheus.NewDesc("dts_oldest_pending_job_age_seconds", "How long the oldest due job has waited.", nil, nil),
		byState:   prometheus.NewDesc("dts_jobs", "Jobs in PostgreSQL by status.", []string{"status"}, nil),
		workers:   prometheus.NewDesc("workers_active", "Workers by state (available, busy, draining, unavailable), as the leader sees them.", []string{"state"}, nil),
		inFlight:  prometheus.NewDesc("dts_worker_in_flight_jobs", "Jobs leased to each worker.", []string{"worker"}, nil),
		freeSlots: prometheus.NewDesc("dts_worker_free_slots", "Free slots of each worker.", []string{"worker"}, nil),
		hbAge:     prometheus.NewDesc("dts_worker_heartbeat_age_seconds", "Seconds since each worker's last heartbeat arrived in Redis (its stream id's time, read against the coordinator's clock).", []string{"worker"}, nil),
		unhandled: prometheus.NewDesc("dts_jobs_unhandled", "Pending and retrying jobs whose name no live (available or busy) worker handles, by name: the 20 largest, the rest as other.", []string{"name"}, nil),
		starved:   prometheus.NewDesc("dts_jobs_starved_seconds", "How long the oldest due job of each name has waited although a worker that handles the name has a free slot, for the names where that is over 30 s (dispatch is not serving them): the 20 longest waits. No series while every name is served.", []string{"name"}, nil),
		qDepth:    prometheus.NewDesc("dts_queue_depth", "Due jobs waiting for a worker, by queue (the 50 largest, paused and capped queues, the rest as other).", []string{"queue"}, nil),
		qOldest:   prometheus.NewDesc("dts_queue_oldest_job_age_seconds", "How long the oldest due job of each queue has waited.", []string{"queue"}, nil),
		qRunning:  prometheus.NewDesc("dts_queue_running", "Jobs leased now, by queue.", []string{"queue"}, nil),
		qPaused:   prometheus.NewDesc("dts_queue_paused", "1 while a queue is paused.", []string{"queue"}, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.queue, c.dlq, c.oldest, c.byState, c.workers, c.inFlight, c.freeSlots, c.hbAge, c.unhandled, c.starved,
		c.qDepth, c.qOldest, c.qRunning, c.qPaused} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, err := c.store.StatsGet(ctx); err != nil {
		c.metrics.countStoreError(storeOpStats)
	} else {
		ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, float64(st.QueueDepth))
		ch <- prometheus.MustNewConstMetric(c.dlq, prometheus.GaugeValue, float64(st.DeadDepth))
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, st.OldestPendingAge)
		for s, n := range st.ByState {
			ch <- prometheus.MustNewConstMetric(c.byState, prometheus.GaugeValue, float64(n), string(s))
		}
		for name, n := range topUnhandled(st.Unhandled, st.UnhandledOther, maxUnhandledSeries) {
			ch <- prometheus.MustNewConstMetric(c.unhandled, prometheus.GaugeValue, float64(n), name)
		}
		for name, waited := range topStarved(st.Starved, maxUnhandledSeries) {
			ch <- prometheus.MustNewConstMetric(c.starved, prometheus.GaugeValue, waited, name)
		}
	}
	if qs, err := c.store.QueueStatsList(ctx); err != nil {
		c.metrics.countStoreError(storeOpQueueStats)
	} else {
		for _, q := range queueSeries(qs, maxQueueSeries) {
			ch <- prometheus.MustNewConstMetric(c.qDepth, prometheus.GaugeValue, float64(q.Depth), q.Name)
			ch <- prometheus.MustNewConstMetric(c.qOldest, prometheus.GaugeValue, q.OldestAge, q.Name)
			ch <- prometheus.MustNewConstMetric(c.qRunning, prometheus.GaugeValue, float64(q.Running), q.Name)
			paused := 0.0
			if q.Paused {
				paused = 1
			}
			ch <- prometheus.MustNewConstMetric(c.qPaused, prometheus.GaugeValue, paused, q.Name)
		}
	}
	reg := c.registry()
	if reg == nil {
		return
	}
	counts := map[string]int{registry.StateAvailable: 0, registry.StateBusy: 0, registry.StateDraining: 0, registry.StateUnavailable: 0}
	now := time.Now()
	for _, w := range reg.Snapshot() {
		counts[w.State()]++
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(len(w.InFlight)), w.ID)
		free := 0
		if w.State() == registry.StateAvailable {
			free = w.Concurrency - len(w.InFlight)
		}
		ch <- prometheus.MustNewConstMetric(c.freeSlots, prometheus.GaugeValue, float64(free), w.ID)
		ch <- prometheus.MustNewConstMetric(c.hbAge, prometheus.GaugeValue, now.Sub(w.LastSeen).Seconds(), w.ID)
	}
	for s, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(n), s)
	}
}

// topStarved keeps the max names with the longest waits (ties by name).
func topStarved(byName map[string]float64, max int) map[string]float64 {
	if len(byName) <= max {
		return byName
	}
	names := slices.Collect(maps.Keys(byName))
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(byName[b], byName[a]), cmp.Compare(a, b))
	})
	out := make(map[string]float64, max)
	for _, n := range names[:max] {
		out[n] = byName[n]
	}
	return out
}

// maxUnhandledSeries bounds the name label of dts_jobs_unhandled and
// dts_jobs_starved_seconds: the names are whatever clients submitted.
const maxUnhandledSeries = 20

// unhandledOther is the name label of the jobs beyond the largest
// maxUnhandledSeries names (a job literally named "other" is counted in it).
const unhandledOther = "other"

// topUnhandled keeps the max names with the most jobs (ties by name) and
// sums the rest, and other, under unhandledOther, which is always present
// (at 0 while every waiting job has a worker), so that dashboards see a
// real 0 rather than no data.
func topUnhandled(byName map[string]int64, other int64, max int) map[string]int64 {
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if byName[names[i]] != byName[names[j]] {
			return byName[names[i]] > byName[names[j]]
		}
		return names[i] < names[j]
	})
	out := make(map[string]int64, min(len(names), max)+1)
	for i, n := range names {
		if i < max && n != unhandledOther {
			out[n] = byName[n]
		} else {
			other += byName[n]
		}
	}
	out[unhandledOther] = other
	return out
}

// maxQueueSeries bounds the queue label of the per-queue gauges: queue
// names are whatever clients submitted.
const maxQueueSeries = 50

// queueOther is the queue label of the queues beyond maxQueueSeries.
const queueOther = "other"

// queueSeries keeps every paused or capped queue and the largest others
// (by due jobs plus running, then name) up to max in all, and sums the
// rest under queueOther (depth and running summed, the oldest age the
// largest), which is always present (at 0 when nothing was summed), so
// that dashboards see a real 0 rather than no data.
func queueSeries(qs []store.QueueStats, max int) []store.QueueStats {
	sorted := slices.Clone(qs)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if ca, cb := a.Paused || a.Concurrency > 0, b.Paused || b.Concurrency > 0; ca != cb {
			return ca
		}
		if a.Depth+a.Running != b.Depth+b.Running {
			return a.Depth+a.Running > b.Depth+b.Running
		}
		return a.Name < b.Name
	})
	var out []store.QueueStats
	other := store.QueueStats{Name: queueOther}
	for _, q := range sorted {
		configured := q.Paused || q.Concurrency > 0
		if (len(out) < max || configured) && q.Name != queueOther {
			out = append(out, q)
			continue
		}
		other.Depth += q.Depth
		other.Running += q.Running
		other.OldestAge = math.Max(other.OldestAge, q.OldestAge)
	}
	return append(out, other)
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
