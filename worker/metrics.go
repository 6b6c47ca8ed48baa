package worker

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	finished    *prometheus.CounterVec   // name, outcome
	duration    *prometheus.HistogramVec // name
	redisErrors *prometheus.CounterVec   // op
	badMessages prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, concurrency int, inFlight func() int) *metrics {
	m := &metrics{
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dts_worker_attempts_total",
			Help: "Attempts this worker finished, by job type and outcome (completed, failed, released)."}, []string{"name", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "dts_worker_attempt_duration_seconds",
			Help:    "Run time of each attempt on this worker.",
			Buckets: []float64{.0005, .001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"name"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dts_worker_redis_errors_total",
			Help: "Redis operations of this worker that failed, by operation."}, []string{"op"}),
		badMessages: prometheus.NewCounter(prometheus.CounterOpts{Name: "dts_worker_bad_messages_total",
			Help: "Undecodable messages on this worker's lists, dropped."}),
	}
	for _, op := range redisOps {
		m.redisErrors.WithLabelValues(string(op))
	}
	reg.MustRegister(m.finished, m.duration, m.redisErrors, m.badMessages,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "dts_worker_in_flight",
			Help: "Jobs running on this worker."}, func() float64 { return float64(inFlight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "dts_worker_concurrency",
			Help: "Jobs this worker runs at once at most."}, func() float64 { return float64(concurrency) }))
	return m
}

// redisOp is the op label of dts_worker_redis_errors_total: which Redis
// operation failed. Every value is a constant below, listed in redisOps, so
// that newMetrics creates its series at zero (TestOpLabelsPreCreated).
type redisOp string

const (
	redisOpHeartbeat   redisOp = "heartbeat"
	redisOpReceive     redisOp = "receive"
	redisOpSendResults redisOp = "send_results"
)

var redisOps = []redisOp{redisOpHeartbeat, redisOpReceive, redisOpSendResults}

// countRedisError counts a failed Redis operation.
func (m *metrics) countRedisError(op redisOp) { m.redisErrors.WithLabelValues(string(op)).Inc() }
