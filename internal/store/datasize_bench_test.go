package store_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
)

// benchFinished is how many finished jobs the data-size benchmarks keep
// in the table: DTS_BENCH_FINISHED, default 1,000,000.
func benchFinished(b *testing.B) int {
	n := 1_000_000
	if v := os.Getenv("DTS_BENCH_FINISHED"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 0 {
			b.Fatalf("DTS_BENCH_FINISHED=%q: want a count", v)
		}
	}
	return n
}

// fillFinished writes n completed jobs straight into the table, finished
// age ago, a million per statement, then VACUUM ANALYZEs it as autovacuum
// would have by then.
func fillFinished(b *testing.B, url string, n int, age time.Duration) {
	ctx := b.Context()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(ctx)
	t0 := time.Now()
	for done := 0; done < n; done += 1_000_000 {
		_, err := db.Exec(ctx, `INSERT INTO jobs (name, status, attempts, created_at, started_at, finished_at, next_run_at)
			SELECT 'bench', 'completed', 1, t, t, t, t
			FROM (SELECT now() - $2 * interval '1 millisecond' AS t) x, generate_series(1, $1)`,
			min(1_000_000, n-done), age.Milliseconds())
		if err != nil {
			b.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d finished jobs written and vacuumed in %v", n, time.Since(t0).Round(time.Second))
}

// vacuumEvery runs VACUUM jobs every interval until stop is called, as
// autovacuum does on a server with the recommended autovacuum_naptime of
// 5 s (operations.md, PostgreSQL settings) and migration 004's thresholds
// for the jobs table (a vacuum per 20,000 dead rows, which these loads
// pass within every naptime). pgtest's server runs with autovacuum off,
// and a vacuum is what removes the index entries of deleted and updated
// rows that every later scan would otherwise walk.
func vacuumEvery(b *testing.B, url string, interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(b.Context())
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := db.Exec(ctx, `VACUUM jobs`); err != nil && ctx.Err() == nil {
					b.Errorf("vacuum: %v", err)
					return
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
		db.Close(context.Background())
	}
}

// autovacuumNaptime is how often vacuumEvery vacuums in the data-size
// benchmarks.
const autovacuumNaptime = 5 * time.Second

// BenchmarkClaimBesideFinished: the claim's latency with the finished jobs
// that retention keeps (benchFinished of them, finished an hour ago)
// beside the due ones, against an empty table, both vacuumed as autovacuum
// would: the loop of BenchmarkClaimUnlimited (insert 1,000 jobs, claim
// them, complete them). p50-claim-µs and p99-claim-µs are the claim
// statement's.
func BenchmarkClaimBesideFinished(b *testing.B) {
	for _, n := range []int{0, benchFinished(b)} {
		b.Run("finished="+strconv.Itoa(n), func(b *testing.B) {
			ctx := b.Context()
			url := pgtest.NewDatabase(b)
			fillFinished(b, url, n, time.Hour)
			s, epoch := openBenchStore(b, url, store.Options{MaxConns: 4, PinIndexPlans: true})
			const batch = 1000
			slots := slices.Repeat([]string{"w"}, batch)
			ps := make([]store.JobInsertParams, batch)
			for i := range ps {
				ps[i] = store.JobInsertParams{Name: "bench", MaxRetries: 1}
			}
			var claims []time.Duration
			defer vacuumEvery(b, url, autovacuumNaptime)()
			b.ResetTimer()
			for done := 0; done < b.N; done += batch {
				if _, err := s.JobInsert(ctx, ps); err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				cs, err := s.JobClaimBatch(ctx, store.JobClaimParams{Epoch: epoch, Slots: slots, Lease: time.Minute})
				claims = append(claims, time.Since(t0))
				if err != nil || len(cs) != batch {
					b.Fatalf("claim = %d jobs, %v", len(cs), err)
				}
				completeAll(b, s, epoch, cs)
			}
			slices.Sort(claims)
			q := func(f float64) float64 { return float64(claims[int(f*float64(len(claims)-1))].Microseconds()) }
			b.ReportMetric(q(0.5), "p50-claim-µs")
			b.ReportMetric(q(0.99), "p99-claim-µs")
		})
	}
}

// BenchmarkCleanupRate: how fast the retention cleaner deletes finished
// jobs (benchFinished of them, all past their retention), as the
// coordinator runs it (JobCleanup, batches of 5,000), vacuumed as
// autovacuum would meanwhile. rows/s is the figure; it must exceed the
// rate at which jobs finish for retention to keep the table's size
// steady.
func BenchmarkCleanupRate(b *testing.B) {
	n := benchFinished(b)
	for range b.N {
		b.StopTimer()
		ctx := b.Context()
		url := pgtest.NewDatabase(b)
		fillFinished(b, url, n, 48*time.Hour)
		s, epoch := openBenchStore(b, url, store.Options{MaxConns: 4})
		stopVacuum := vacuumEvery(b, url, autovacuumNaptime)
		b.StartTimer()
		t0 := time.Now()
		deleted, err := s.JobCleanup(ctx, epoch, 24*time.Hour, 24*time.Hour, 5000)
		elapsed := time.Since(t0)
		b.StopTimer()
		stopVacuum()
		s.Close() // the next iteration's database has its own
		if err != nil || deleted != int64(n) {
			b.Fatalf("cleanup deleted %d of %d: %v", deleted, n, err)
		}
		b.ReportMetric(float64(n)/elapsed.Seconds(), "rows/s")
	}
}
