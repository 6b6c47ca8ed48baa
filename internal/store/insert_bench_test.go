package store_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
)

// BenchmarkJobInsert measures the insert of one batch of 1,000 jobs (one
// JobInsert, as POST /submit_jobs and the insert batcher make them): the
// bench's noop jobs, without keys or traces. One op is one batch; ns/job
// and the allocations per op (b.ReportAllocs) are what the submitter
// spends on it. Run it on two commits to compare (docs/benchmarks.md).
func BenchmarkJobInsert(b *testing.B) {
	ctx := b.Context()
	s, err := store.Open(ctx, pgtest.NewDatabase(b), store.Options{MaxConns: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const batch = 1000
	ps := make([]store.JobInsertParams, batch)
	for i := range ps {
		ps[i] = store.JobInsertParams{Name: "noop", MaxRetries: 3,
			Payload: json.RawMessage(fmt.Sprintf(`"bench_%d"`, i))}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.JobInsert(ctx, ps); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/job")
}
