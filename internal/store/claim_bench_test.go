package store_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
	"github.com/jackc/pgx/v5"
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
	backlog := 10_000
	if os.Getenv("DTS_BENCH_NO_BACKLOG") != "" {
		backlog = 0
	}
	benchClaimShape(b, backlog, 0, 0, 0, nil)
}

// BenchmarkClaimShapes measures what the claim of unlimited jobs costs as
// the data around it grows, the loop of BenchmarkClaimUnlimited (insert
// 500, claim them, complete them, over a backlog of 10,000 due jobs of
// lower priority) in the shapes a large deployment has:
//   - plain: no queue settings, no limits (the baseline);
//   - limitkeys=10000: 10,000 concurrency-limit keys (limit 1), each with
//     a job leased and one waiting, so that every round also runs the
//     limited claim, as the dispatcher does while limited jobs wait (it
//     offers that claim half the slots; here it finds none startable);
//   - queues=N: the 500 jobs and the backlog spread over N queues, claimed
//     by the claim that honours queues with a weighted share per queue, as
//     for workers that list N queues in WORKER_QUEUES;
//   - names=10: claimed for ten names of which one has jobs, as for the
//     worker binary's built-in handlers in a drain of one name;
//   - groups=N: the jobs and the backlog spread over N names, claimed for
//     N groups of one name each in one call (JobClaimGroups), as for a
//     mixed fleet.
//
// ns/job is one job's insert, claim and completion; ns/claim the claim's
// part (for limitkeys, both claims).
func BenchmarkClaimShapes(b *testing.B) {
	for _, shape := range []struct {
		name      string
		limitKeys int
		queues    int
		groups    int
		types     []string
	}{
		{name: "plain"},
		{name: "limitkeys=10000", limitKeys: 10_000},
		{name: "queues=1", queues: 1},
		{name: "queues=100", queues: 100},
		{name: "queues=1000", queues: 1000},
		{name: "names=10", types: []string{"a", "b", "bench", "c", "d", "e", "f", "g", "h", "i"}},
		{name: "groups=1", groups: 1},
		{name: "groups=50", groups: 50},
	} {
		b.Run(shape.name, func(b *testing.B) {
			benchClaimShape(b, 10_000, shape.limitKeys, shape.queues, shape.groups, shape.types)
		})
	}
}

// benchClaimShape runs the loop over a backlog of that many due jobs of
// lower priority, with limitKeys full limit keys and the jobs spread over
// that many queues (0: none).
func benchClaimShape(b *testing.B, backlog, limitKeys, queues, groups int, types []string) {
	ctx := b.Context()
	url := pgtest.NewDatabase(b)
	s, epoch := openBenchStore(b, url, store.Options{MaxConns: 4, PinIndexPlans: true})
	const batch = 500
	var names []string // queues, when the shape has them
	for i := range queues {
		names = append(names, fmt.Sprintf("q%04d", i))
	}
	queueOf := func(i int) string {
		if queues == 0 {
			return ""
		}
		return names[i%queues]
	}
	nameOf := func(i int) string {
		if groups == 0 {
			return "bench"
		}
		return fmt.Sprintf("n%02d", i%groups)
	}
	var claimGroups []store.ClaimGroup
	for g := range groups {
		cg := store.ClaimGroup{Types: []string{nameOf(g)}}
		for range batch / groups {
			cg.Slots = append(cg.Slots, "w")
		}
		claimGroups = append(claimGroups, cg)
	}
	insert := func(n, prio int) {
		ps := make([]store.JobInsertParams, n)
		for i := range ps {
			ps[i] = store.JobInsertParams{Name: nameOf(i), Priority: prio, MaxRetries: 1, Queue: queueOf(i)}
		}
		if _, err := s.JobInsert(ctx, ps); err != nil {
			b.Fatal(err)
		}
	}
	for range backlog / 1000 {
		insert(1000, -1) // the backlog, behind every batch
	}
	// Statistics as autovacuum keeps them on a busy table: the steady
	// state. A claim planned before any (TestPlainClaimPlannedColdReadsItsIndex,
	// TestQueueClaimPlanWithoutStatistics) is a test's matter.
	if db, err := pgx.Connect(ctx, url); err != nil {
		b.Fatal(err)
	} else {
		if _, err := db.Exec(ctx, "ANALYZE jobs"); err != nil {
			b.Fatal(err)
		}
		_ = db.Close(ctx)
	}
	if limitKeys > 0 {
		db, err := pgx.Connect(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		for _, sql := range []string{
			`INSERT INTO limits (key, concurrency) SELECT 'key-' || k, 1 FROM generate_series(1, $1) k`,
			`INSERT INTO jobs (name, limit_key) SELECT 'bench', 'key-' || k FROM generate_series(1, $1) k, generate_series(1, 2)`,
			`UPDATE jobs SET status = 'leased', attempts = 1, lease_token = id, worker_id = 'busy',
				lease_expires_at = now() + interval '1 hour'
			 WHERE id IN (SELECT min(id) FROM jobs WHERE limit_key IS NOT NULL GROUP BY limit_key)`,
			`ANALYZE jobs`,
		} {
			args := []any{limitKeys}
			if !strings.Contains(sql, "$1") {
				args = nil
			}
			if _, err := db.Exec(ctx, sql, args...); err != nil {
				b.Fatalf("%s: %v", sql, err)
			}
		}
		_ = db.Close(ctx)
	}
	slots := make([]string, batch)
	for i := range slots {
		slots[i] = "w"
	}
	var shares []int32 // an even weighted share of the slots per queue
	for i := range queues {
		shares = append(shares, int32(batch/queues))
		if i < batch%queues {
			shares[i]++
		}
	}
	claim := func() ([]store.Claimed, error) {
		p := store.JobClaimParams{Epoch: epoch, Types: types, Slots: slots, Lease: time.Minute}
		if limitKeys > 0 {
			got, err := s.JobClaimLimited(ctx, store.JobClaimLimitedParams{
				JobClaimParams: store.JobClaimParams{Epoch: epoch, Slots: slots[:batch/2], Lease: time.Minute}})
			if err != nil || len(got) != 0 {
				b.Fatalf("limited claim = %d jobs, %v; every key is full", len(got), err)
			}
		}
		if groups > 0 {
			return s.JobClaimGroups(ctx, store.JobClaimGroupsParams{Epoch: epoch, Groups: claimGroups, Lease: time.Minute})
		}
		if queues == 0 {
			return s.JobClaimBatch(ctx, p)
		}
		return s.JobClaimQueues(ctx, store.JobClaimQueuesParams{JobClaimParams: p, Queues: names, Shares: shares})
	}
	var tInsert, tClaim, tComplete time.Duration
	b.ResetTimer()
	done := 0
	for ; done < b.N; done += batch {
		t0 := time.Now()
		insert(batch, 0)
		t1 := time.Now()
		cs, err := claim()
		t2 := time.Now()
		tInsert += t1.Sub(t0)
		tClaim += t2.Sub(t1)
		if err != nil || len(cs) != batch {
			b.Fatalf("claim = %d jobs, %v", len(cs), err)
		}
		completeAll(b, s, epoch, cs)
		tComplete += time.Since(t2)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(done), "ns/job")
	b.ReportMetric(float64(tInsert.Nanoseconds())/float64(done), "ns/insert")
	b.ReportMetric(float64(tClaim.Nanoseconds())/float64(done), "ns/claim")
	b.ReportMetric(float64(tComplete.Nanoseconds())/float64(done), "ns/complete")
}

// openBenchStore opens the store on url, closed when the benchmark ends,
// and takes the leadership its writes carry.
func openBenchStore(b *testing.B, url string, opts store.Options) (*store.Store, int64) {
	b.Helper()
	s, err := store.Open(b.Context(), url, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	epoch, err := s.LeaderAcquire(b.Context(), "bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	return s, epoch
}

// completeAll completes claimed jobs as their workers would.
func completeAll(b *testing.B, s *store.Store, epoch int64, cs []store.Claimed) {
	b.Helper()
	fin := make([]store.Completion, len(cs))
	for i, c := range cs {
		fin[i] = store.Completion{ID: c.ID, LeaseToken: c.LeaseToken, WorkerID: c.WorkerID}
	}
	if _, err := s.JobCompleteMany(b.Context(), epoch, fin); err != nil {
		b.Fatal(err)
	}
}
