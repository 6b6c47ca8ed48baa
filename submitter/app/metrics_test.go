package app

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dtsched/dts/internal/testkit"
)

// TestOpLabelsPreCreated: every storeOp and redisOp constant declared in
// this package has its dts_store_errors_total / dts_redis_errors_total
// series from the start, and call sites name ops by constant (an untyped
// string would compile, and could name a series nobody created).
func TestOpLabelsPreCreated(t *testing.T) {
	t.Parallel()
	consts, literals := testkit.ScanOps(t, ".", []string{"storeOp", "redisOp"},
		[]string{"storeError", "countStoreError", "countRedisError",
			"storeErrors.WithLabelValues", "redisErrors.WithLabelValues"})
	for _, l := range literals {
		t.Errorf("%s: op %q written as a literal; use a storeOp or redisOp constant", l.Pos, l.Value)
	}

	reg := prometheus.NewRegistry()
	newMetrics(reg)
	testkit.CheckOpSeries(t, consts, testkit.OpSeries(t, reg),
		map[string]string{"storeOp": "dts_store_errors_total", "redisOp": "dts_redis_errors_total"})
}
