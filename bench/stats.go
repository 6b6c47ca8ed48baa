package bench

import (
	"math"
	"slices"
)

// Percentiles summarises a sample of delays, in milliseconds.
type Percentiles struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	Min  float64 `json:"min_ms"`
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

// percentiles summarises seconds (not modified) by the nearest-rank method:
// pX is the smallest value that at least X% of the sample do not exceed.
func percentiles(seconds []float64) Percentiles {
	if len(seconds) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(seconds)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return 1000 * s[max(0, min(i, len(s)-1))]
	}
	return Percentiles{
		N:    len(s),
		Mean: 1000 * sum / float64(len(s)),
		Min:  1000 * s[0],
		P50:  rank(0.50),
		P95:  rank(0.95),
		P99:  rank(0.99),
		Max:  1000 * s[len(s)-1],
	}
}

// histogram counts values: value -> how many.
func histogram(values []int) map[int]int {
	h := map[int]int{}
	for _, v := range values {
		h[v]++
	}
	return h
}
