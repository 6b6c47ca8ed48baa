package coordinator

import (
	"maps"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testkit"
)

// TestOpLabelsPreCreated: every storeOp and redisOp constant declared in
// this package has its dts_store_errors_total / dts_redis_errors_total
// series from the start, and no call site passes an op as a literal (an
// untyped string would compile, and name a series nobody created).
func TestOpLabelsPreCreated(t *testing.T) {
	t.Parallel()
	consts, literals := testkit.ScanOps(t, ".", []string{"storeOp", "redisOp"},
		[]string{"storeError", "redisError", "countStoreError", "countRedisError"})
	for _, l := range literals {
		t.Errorf("%s: op %q written as a literal; use a storeOp or redisOp constant", l.Pos, l.Value)
	}
	reg := prometheus.NewRegistry()
	newMetrics(reg)
	testkit.CheckOpSeries(t, consts, testkit.OpSeries(t, reg),
		map[string]string{"storeOp": "dts_store_errors_total", "redisOp": "dts_redis_errors_total"})
}

func TestTopUnhandled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		byName map[string]int64
		other  int64
		max    int
		want   map[string]int64
	}{
		{"none", map[string]int64{}, 0, 2, map[string]int64{"other": 0}},
		{"under the cap", map[string]int64{"emial": 3}, 0, 2, map[string]int64{"emial": 3, "other": 0}},
		{"over the cap, ties by name", map[string]int64{"a": 1, "b": 5, "c": 1, "d": 2}, 0, 2,
			map[string]int64{"b": 5, "d": 2, "other": 2}},
		{"the store's rest added", map[string]int64{"a": 1, "b": 5}, 7, 1, map[string]int64{"b": 5, "other": 8}},
		{"only the store's rest", map[string]int64{}, 4, 2, map[string]int64{"other": 4}},
		{"a job named other", map[string]int64{"other": 9, "x": 1}, 1, 5, map[string]int64{"x": 1, "other": 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := topUnhandled(tt.byName, tt.other, tt.max); !maps.Equal(got, tt.want) {
				t.Errorf("topUnhandled = %v, want %v", got, tt.want)
			}
		})
	}
}

// Per-queue series: paused and capped queues always, then the largest up
// to the bound, the rest summed as other, which is always there.
func TestQueueSeries(t *testing.T) {
	t.Parallel()
	qs := []store.QueueStats{
		{Name: "a", Depth: 1}, {Name: "b", Depth: 9, OldestAge: 2}, {Name: "c", Running: 5, OldestAge: 7},
		{Name: "p", Paused: true}, {Name: "cap", Concurrency: 3}, {Name: "other", Depth: 4, OldestAge: 3},
	}
	got := queueSeries(qs, 3)
	// c (running 5), a (1) and a queue literally named other (4) are summed.
	want := []store.QueueStats{{Name: "cap", Concurrency: 3}, {Name: "p", Paused: true}, {Name: "b", Depth: 9, OldestAge: 2},
		{Name: "other", Depth: 1 + 4, Running: 5, OldestAge: 7}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("queueSeries =\n%+v\nwant\n%+v", got, want)
	}
	if got := queueSeries(qs[:2], 3); len(got) != 3 || got[2] != (store.QueueStats{Name: "other"}) {
		t.Fatalf("under the bound: %+v; want the two queues and other at 0", got)
	}
}
