package store_test

import (
	"os"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
)

// BenchmarkClaimUnlimited measures the unlimited path: insert a batch of
// jobs without a concurrency key (one JobInsert statement, as the insert
// batcher makes them), lease them all with the plain claim (JobClaimBatch,
// dts_claim_jobs) and complete them, on a table that keeps a backlog of
// 10,000 due jobs beneath them (DTS_BENCH_NO_BACKLOG=1: none). One op is
// one job's insert, claim and completion; ns/insert, ns/claim and
// ns/complete split it. Run it on two branches to compare
// (docs/benchmarks.md, "Limits").
func BenchmarkClaimUnlimited(b *testing.B) {
	ctx := b.Context()
	s, err := store.Open(ctx, pgtest.NewDatabase(b), store.Options{MaxConns: 4, PinIndexPlans: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	epoch, err := s.LeaderAcquire(ctx, "bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	const batch = 500
	backlogBatches := 10
	if os.Getenv("DTS_BENCH_NO_BACKLOG") != "" {
		backlogBatches = 0
	}
	insert := func(n, prio int) {
		ps := make([]store.JobInsertParams, n)
		for i := range ps {
			ps[i] = store.JobInsertParams{Name: "bench", Priority: prio, MaxRetries: 1}
		}
		if _, err := s.JobInsert(ctx, ps); err != nil {
			b.Fatal(err)
		}
	}
	for range backlogBatches {
		insert(1000, -1) // the backlog, behind every batch
	}
	slots := make([]string, batch)
	for i := range slots {
		slots[i] = "w"
	}
	var tInsert, tClaim, tComplete time.Duration
	b.ResetTimer()
	done := 0
	for ; done < b.N; done += batch {
		t0 := time.Now()
		insert(batch, 0)
		t1 := time.Now()
		cs, err := s.JobClaimBatch(ctx, store.JobClaimParams{Epoch: epoch, Slots: slots, Lease: time.Minute})
		t2 := time.Now()
		tInsert += t1.Sub(t0)
		tClaim += t2.Sub(t1)
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
		tComplete += time.Since(t2)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(done), "ns/job")
	b.ReportMetric(float64(tInsert.Nanoseconds())/float64(done), "ns/insert")
	b.ReportMetric(float64(tClaim.Nanoseconds())/float64(done), "ns/claim")
	b.ReportMetric(float64(tComplete.Nanoseconds())/float64(done), "ns/complete")
}
