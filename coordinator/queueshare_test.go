package coordinator

import (
	"slices"
	"strconv"
	"testing"

	"github.com/dtsched/dts/internal/wire"
)

func TestShareSplitterProportions(t *testing.T) {
	t.Parallel()
	qs := []wire.QueueWeight{{Name: "critical", Weight: 6}, {Name: "default", Weight: 3}, {Name: "low", Weight: 1}, {Name: "spare", Weight: 0}}
	for _, c := range []struct {
		name   string
		rounds int
		n      int
		paused map[string]bool
		names  []string
		want   []int32 // summed over the rounds
	}{
		{"one round of ten", 1, 10, nil, []string{"critical", "default", "low", "spare"}, []int32{6, 3, 1, 0}},
		{"a thousand slots", 1, 1000, nil, []string{"critical", "default", "low", "spare"}, []int32{600, 300, 100, 0}},
		{"one slot a round: low still gets its tenth", 20, 1, nil, []string{"critical", "default", "low", "spare"}, []int32{12, 6, 2, 0}},
		{"three slots a round", 10, 3, nil, []string{"critical", "default", "low", "spare"}, []int32{18, 9, 3, 0}},
		{"paused queues take no share", 1, 9, map[string]bool{"critical": true}, []string{"default", "low", "spare"}, []int32{7, 2, 0}},
	} {
		var sp shareSplitter
		sum := make([]int32, len(c.want))
		var names []string
		for range c.rounds {
			var shares []int32
			names, shares = sp.split(qs, c.paused, c.n)
			for i, s := range shares {
				sum[i] += s
			}
		}
		if !slices.Equal(names, c.names) || !slices.Equal(sum, c.want) {
			t.Errorf("%s: names %v shares %v; want %v %v", c.name, names, sum, c.names, c.want)
		}
	}
}

// Weight 0 everywhere (or every weighted queue paused) gives no share:
// the claim then goes by priority across the queues.
func TestShareSplitterNoWeight(t *testing.T) {
	t.Parallel()
	var sp shareSplitter
	names, shares := sp.split([]wire.QueueWeight{{Name: "a", Weight: 0}, {Name: "b", Weight: 3}}, map[string]bool{"b": true}, 5)
	if !slices.Equal(names, []string{"a"}) || !slices.Equal(shares, []int32{0}) {
		t.Fatalf("split = %v %v", names, shares)
	}
}

// BenchmarkShareSplit1000 splits a dispatch round's 500 slots over 1,000
// weighted queues, as for workers whose WORKER_QUEUES lists them all.
func BenchmarkShareSplit1000(b *testing.B) {
	qs := make([]wire.QueueWeight, 1000)
	for i := range qs {
		qs[i] = wire.QueueWeight{Name: "q" + strconv.Itoa(i), Weight: 1 + i%10}
	}
	var sp shareSplitter
	b.ReportAllocs()
	for b.Loop() {
		sp.split(qs, nil, 500)
	}
}
