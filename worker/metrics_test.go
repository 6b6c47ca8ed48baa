package worker

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dtsched/dts/internal/testkit"
)

// TestOpLabelsPreCreated: every redisOp constant declared in this package
// has its dts_worker_redis_errors_total series from the start, and no call
// site passes an op as a literal (an untyped string would compile, and name
// a series nobody created).
func TestOpLabelsPreCreated(t *testing.T) {
	t.Parallel()
	consts, literals := testkit.ScanOps(t, ".", []string{"redisOp"},
		[]string{"countRedisError", "redisErrors.WithLabelValues"})
	for _, l := range literals {
		t.Errorf("%s: op %q written as a literal; use a redisOp constant", l.Pos, l.Value)
	}
	reg := prometheus.NewRegistry()
	newMetrics(reg, 1, func() int { return 0 })
	testkit.CheckOpSeries(t, consts, testkit.OpSeries(t, reg),
		map[string]string{"redisOp": "dts_worker_redis_errors_total"})
}
