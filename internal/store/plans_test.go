package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
)

// A pool opened with PinIndexPlans keeps the lease statements on their
// indexes after the jobs table grows, though each session cached its
// generic plans while the table was nearly empty; StatsGet still counts.
// (It asks the store's own session to flush its statistics: see
// export_test.go.)
func TestPinIndexPlansKeepsLeaseStatementsOffSequentialScans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, epoch, url := openPinnedLeader(t)

	round := func(n int) {
		t.Helper()
		ps := make([]store.JobInsertParams, n)
		for i := range ps {
			ps[i] = store.JobInsertParams{Name: "p", MaxRetries: 1}
		}
		if _, err := s.JobInsert(ctx, ps); err != nil {
			t.Fatal(err)
		}
		cs, err := s.JobClaimBatch(ctx, store.JobClaimParams{Epoch: epoch, Slots: []string{"w", "w", "w"}, Lease: time.Minute})
		if err != nil || len(cs) != 3 {
			t.Fatalf("claim = %d jobs, %v", len(cs), err)
		}
		if fin, err := s.JobCompleteMany(ctx, epoch, []store.Completion{{ID: cs[0].ID, LeaseToken: cs[0].LeaseToken, WorkerID: cs[0].WorkerID}}); err != nil || len(fin) != 1 {
			t.Fatalf("complete = %v, %v", fin, err)
		}
		out, err := s.JobFailMany(ctx, epoch, []store.Failure{{ID: cs[1].ID, LeaseToken: cs[1].LeaseToken, WorkerID: cs[1].WorkerID, Reason: job.ReasonError}},
			func(int) time.Duration { return time.Hour })
		if err != nil || len(out) != 1 {
			t.Fatalf("fail = %v, %v", out, err)
		}
		if rel, err := s.JobReleaseMany(ctx, epoch, []store.Release{{ID: cs[2].ID, LeaseToken: cs[2].LeaseToken, WorkerID: cs[2].WorkerID}}); err != nil || len(rel) != 1 {
			t.Fatalf("release = %v, %v", rel, err)
		}
		if _, err := s.JobReclaimExpired(ctx, epoch, nil, func(int) time.Duration { return 0 }); err != nil {
			t.Fatal(err)
		}
	}
	round(5)     // plans cached on a table of a few rows
	round(20000) // the same plans on a grown table
	st, err := s.StatsGet(ctx)
	if err != nil || st.ByState[job.StatePending] != 20001 {
		t.Fatalf("stats = %+v, %v; want 20,001 pending", st.ByState, err)
	}
	if _, err := s.Pool().Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	// The flush happens when that session goes idle; read from another.
	other, err := store.Open(ctx, url, store.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var seqScans, updates int64
	testwait.For(t, 10*time.Second, "the store's session to flush its statistics", func() bool {
		if err := other.Pool().QueryRow(ctx, `SELECT seq_scan, n_tup_upd, pg_stat_clear_snapshot() IS NULL
			FROM pg_stat_user_tables WHERE relname = 'jobs'`).Scan(&seqScans, &updates, new(bool)); err != nil {
			t.Fatal(err)
		}
		return updates > 0
	})
	// StatsGet's two whole-table counts are the only sequential scans.
	if seqScans > 2 {
		t.Errorf("%d sequential scans of jobs; want at most StatsGet's 2", seqScans)
	}
}

// No statement of a store's sessions is JIT-compiled: a pool opened with
// PinIndexPlans prices any sequential scan at 10^10, above every JIT
// threshold, and compiling cost 190 ms per run of the workers sync.
func TestPoolSessionsNeverJITCompile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := store.Open(ctx, pgtest.NewDatabase(t), store.Options{MaxConns: 1, PinIndexPlans: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The workers table has no index for this filter: a forced sequential scan.
	rows, err := s.Pool().Query(ctx, `EXPLAIN SELECT * FROM workers WHERE state <> 'x'`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lines[0], "10000000000") {
		t.Fatalf("the scan is not priced as disabled, so this test checks nothing: %q", lines)
	}
	for _, l := range lines {
		if strings.Contains(l, "JIT") {
			t.Fatalf("the plan would be JIT-compiled: %q", lines)
		}
	}
}

// A statement PostgreSQL rejects with an ERROR wrote nothing and says so
// (job.ErrRefused); a unique violation is also a conflict; an error that
// ends the session (FATAL: the commit may have happened) is not "refused".
func TestRefusedErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := store.Open(ctx, pgtest.NewDatabase(t), store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	long := strings.Repeat("x", 200) // the CHECK allows 128 characters
	if _, err := s.JobInsert(ctx, []store.JobInsertParams{{Name: long}}); !errors.Is(err, job.ErrRefused) {
		t.Errorf("CHECK violation: %v, want job.ErrRefused", err)
	}
	if _, err := s.JobInsert(ctx, []store.JobInsertParams{{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Pool().Exec(ctx, `INSERT INTO jobs (id, name) SELECT id, name FROM jobs LIMIT 1`)
	if err = store.InterpretError(err); !errors.Is(err, job.ErrConflict) || !errors.Is(err, job.ErrRefused) {
		t.Errorf("unique violation: %v, want job.ErrConflict and job.ErrRefused", err)
	}
	err = store.InterpretError(&pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01",
		Message: "terminating connection due to administrator command"})
	if errors.Is(err, job.ErrRefused) {
		t.Errorf("FATAL: %v, must not be job.ErrRefused", err)
	}
}

// The plain claim's lock reads its index in order even when its session
// planned it before any ANALYZE (as a coordinator does on a fresh
// install): it fetches about the rows it leases, not every due row. Before
// migration 013 jobs_queue_due_idx had the same predicate as the claim's
// index, and such a plan could read all due rows from it and sort them
// (6-7 ms per claim of 500 over a backlog of 10,000); the claim's index
// (jobs_name_due_idx since migration 021) says limit_key IS NULL as the
// lock does, which only it implies. The same holds for every shape of
// the claim's names: any name, one, several of which one has due jobs
// (the worker binary's ten built-in names in a drain of one: planned
// cold, the check of which names have due jobs once read the whole
// backlog per name), and two with due jobs.
func TestPlainClaimPlannedColdReadsItsIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, epoch, url := openPinnedLeader(t)
	insert := func(n, prio int, name string) {
		ps := make([]store.JobInsertParams, n)
		for i := range ps {
			ps[i] = store.JobInsertParams{Name: name, Priority: prio}
		}
		if _, err := s.JobInsert(ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		insert(1000, -1, "p")
		insert(1000, -1, "q")
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{`SET plan_cache_mode = force_generic_plan`, `SET enable_seqscan = off`, `BEGIN`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	slots := make([]string, 500)
	for i := range slots {
		slots[i] = "w"
	}
	var before int64
	for _, types := range [][]string{
		nil,
		{"p"},
		{"a", "b", "c", "d", "e", "f", "g", "h", "i", "p"},
		{"p", "q"},
	} {
		insert(500, 0, "p")
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM dts_claim_jobs($1, $2, $3, $4, 60000)`, epoch, types, slots,
			store.NewLeaseTokens(500)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		var read int64
		if err := conn.QueryRow(ctx, `SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'jobs'`).Scan(&read); err != nil {
			t.Fatal(err)
		}
		// One name: the 500 rows it leases and some passed; several:
		// each name's best 500, then the 500 locked by primary key.
		if n != 500 || read-before > 2500 {
			t.Errorf("names %v: claim of 500 over a backlog of 20,000 leased %d and fetched %d rows; want 500, at most 2,500",
				types, n, read-before)
		}
		t.Logf("names %v: %d rows fetched", types, read-before)
		before = read
	}
}

// openPinnedLeader opens a store on a fresh database with one connection
// (so every statement runs in the session whose plans were cached while
// the table was nearly empty) and PinIndexPlans, as the coordinator does,
// and takes the leadership. url is the database's.
func openPinnedLeader(t *testing.T) (s *store.Store, epoch int64, url string) {
	t.Helper()
	url = pgtest.NewDatabase(t)
	s, err := store.Open(t.Context(), url, store.Options{MaxConns: 1, PinIndexPlans: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if epoch, err = s.LeaderAcquire(t.Context(), "test", time.Hour); err != nil {
		t.Fatal(err)
	}
	return s, epoch, url
}

// The claim by queue reads each queue's jobs from jobs_queue_due_idx even
// when it is planned before any ANALYZE: with the statistics of an empty
// table, the planner chose the priority-ordered due index for the
// per-queue scans and filtered by queue, reading the whole due backlog
// once per queue (over 1,000 queues, half a million rows for a claim of
// 500).
func TestQueueClaimPlanWithoutStatistics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, epoch, url := openPinnedLeader(t)
	const queues = 1000
	names := make([]string, queues)
	for i := range names {
		names[i] = fmt.Sprintf("q%04d", i)
	}
	insert := func(n, prio int) {
		ps := make([]store.JobInsertParams, n)
		for i := range ps {
			ps[i] = store.JobInsertParams{Name: "p", Priority: prio, Queue: names[i%queues]}
		}
		if _, err := s.JobInsert(ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		insert(1000, -1)
	}
	insert(500, 0)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	slots := make([]string, 500)
	shares := make([]int32, queues) // one slot each for the queues of the 500 new jobs
	for i := range slots {
		slots[i], shares[i] = "w", 1
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM dts_claim_queue_jobs($1, NULL, $2, $3, $4, $5, 60000)`,
		epoch, names, shares, slots, store.NewLeaseTokens(500)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	var read int64
	if err := conn.QueryRow(ctx, `SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'jobs'`).Scan(&read); err != nil {
		t.Fatal(err)
	}
	if n != 500 || read > 5000 {
		t.Fatalf("claim of 500 from 1,000 queues over a backlog of 10,000 leased %d and fetched %d rows; want 500, a few thousand", n, read)
	}
}
