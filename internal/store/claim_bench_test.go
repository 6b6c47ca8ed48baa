package store_test

import (
	"testing"
	"time"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
)

// BenchmarkClaimUnlimited measures the unlimited path: insert a batch of
// jobs without a concurrency key (one JobInsert statement, as the insert
// batcher makes them), lease them all with the plain claim (JobClaimBatch,
// dts_claim_jobs) and complete them, on a table that keeps a backlog of
// 10,000 due jobs beneath them. One op is one job's insert, claim and
// completion; run it on two branches to compare (docs/benchmarks.md).
func BenchmarkClaimUnlimited(b *testing.B) {
	ctx := b.Context()
	s, err := store.Open(ctx, pgtest.NewDatabase(b), 4, false, store.PinIndexPlans())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	epoch, err := s.LeaderAcquire(ctx, "bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	const batch = 500
	insert := func(n, prio int) {
		ps := make([]store.JobInsertParams, n)
		for i := range ps {
			ps[i] = store.JobInsertParams{Name: "bench", Priority: prio, MaxRetries: 1}
		}
		if _, err := s.JobInsert(ctx, ps); err != nil {
			b.Fatal(err)
		}
	}
	for range 10 {
		insert(1000, -1) // the backlog, behind every batch
	}
	slots := make([]string, batch)
	for i := range slots {
		slots[i] = "w"
	}
	b.ResetTimer()
	done := 0
	for ; done < b.N; done += batch {
		insert(batch, 0)
		cs, err := s.JobClaimBatch(ctx, store.JobClaimParams{Epoch: epoch, Slots: slots, Lease: time.Minute})
		if err != nil || len(cs) != batch {
			b.Fatalf("claim = %d jobs, %v", len(cs), err)
		}
		fin := make([]store.Completion, len(cs))
		for i, c := range cs {
			fin[i] = store.Completion{ID: c.ID, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID}
		}
		if _, err := s.JobCompleteMany(ctx, epoch, fin); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(done), "ns/job")
}
