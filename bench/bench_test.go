package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	pgtest.Cleanup()
	redistest.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests passed: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestQuickRun builds the services, runs every scenario at -quick sizes
// against a pgtest database and the shared test Redis, and checks that the
// report is complete and sane.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs a cluster for about 30 s")
	}
	t.Parallel()
	cfg := testCluster(t, pgtest.NewDatabase(t))
	cfg = Quick(cfg)
	rep := runQuick(t, cfg, 3*time.Minute)

	d := rep.Drain
	if d == nil || d.Completed != int64(cfg.DrainJobs) || d.Jobs != int64(cfg.DrainJobs) {
		t.Fatalf("drain: %+v, want all %d jobs completed", d, cfg.DrainJobs)
	}
	if d.SubmitRate <= 0 || d.Rate <= 0 || d.Seconds <= 0 || d.FirstFinishSeconds > d.Seconds {
		t.Errorf("drain: implausible figures %+v", d)
	}
	for _, name := range []string{"coordinator", "worker-1", "worker-2"} {
		u := use(d.Resources, name)
		if u == nil || u.PeakRSSMB <= 0 || u.CPUSeconds < 0 {
			t.Errorf("drain resources: %s: %+v", name, u)
		}
	}

	s := rep.Sustained
	if s == nil || s.CompletedRate <= 0 || s.SubmitRate <= 0 || s.Seconds <= 0 || s.SubmitErrors != 0 {
		t.Fatalf("sustained: %+v", s)
	}
	// Unpaced clients, held back only by the bound on unfinished jobs
	// (each may have one batch on its way when it is reached).
	def := cfg.WithDefaults()
	if most := int64(def.SustainedBacklog + def.SubmitClients*def.BatchSize); s.BacklogStart > most || s.BacklogEnd > most {
		t.Errorf("sustained: backlog %d at the start and %d at the end, want at most %d", s.BacklogStart, s.BacklogEnd, most)
	}

	if len(rep.Latency) != 2 { // 50/s, then half the sustained rate capped at 100/s
		t.Fatalf("latency: %d runs, want 2: %+v", len(rep.Latency), rep.Latency)
	}
	for _, l := range rep.Latency {
		if l.Submitted == 0 || l.AchievedRate <= 0 || l.Errors != 0 || l.TargetRate > cfg.LatencyMaxRate {
			t.Errorf("latency %s: %+v", l.Label, l)
		}
		for name, p := range map[string]Percentiles{"submit->start": l.SubmitToStart, "submit->finish": l.SubmitToFinish, "http": l.HTTP} {
			if p.N != l.Submitted || !(p.Min <= p.P50 && p.P50 <= p.P95 && p.P95 <= p.P99 && p.P99 <= p.Max) || p.Min < 0 {
				t.Errorf("latency %s %s: %+v, want %d ordered samples", l.Label, name, p, l.Submitted)
			}
		}
		if l.SubmitToStart.P50 > l.SubmitToFinish.P50 {
			t.Errorf("latency %s: start p50 %v after finish p50 %v", l.Label, l.SubmitToStart.P50, l.SubmitToFinish.P50)
		}
	}

	r := rep.Recovery
	if r == nil || r.JobsOnKilled == 0 || r.Recovered != r.JobsOnKilled || r.Relet.N != r.JobsOnKilled {
		t.Fatalf("recovery: %+v, want every job of the killed worker leased again", r)
	}
	if r.Relet.Min <= 0 || r.FinalStatus["completed"] != r.Jobs {
		t.Errorf("recovery: %+v", r)
	}
	for attempts, n := range r.AttemptsKilled {
		if attempts < 2 {
			t.Errorf("recovery: %d of the killed worker's jobs ran %d times", n, attempts)
		}
	}

	out := table(t, rep)
	for _, want := range []string{"DRAIN", "SUSTAINED", "LATENCY", "RECOVERY", "TARGETS", "coordinator"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("report does not marshal: %v", err)
	}
	t.Logf("\n%s", out)
}

func use(u Usage, name string) *ResourceUse {
	for i := range u.Procs {
		if u.Procs[i].Name == name {
			return &u.Procs[i]
		}
	}
	return nil
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// testCluster is what every quick run shares: db (a pgtest database the
// bench uses as it is), the test Redis under the test's own prefix and the
// services built once. A test sets its scenarios and sizes on it and
// passes it through Quick.
func testCluster(t *testing.T, db string) Config {
	t.Helper()
	return Config{DatabaseURL: db, ExistingDatabase: true, RedisURL: redistest.URL(),
		RedisPrefix: redistest.Prefix(t), BinDir: builtBinaries(t)}
}

// runQuick runs cfg within the given time and fails t if the run fails.
func runQuick(t *testing.T, cfg Config, within time.Duration) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	rep, err := Run(ctx, cfg, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

// table renders rep's table, failing t if it cannot.
func table(t *testing.T, rep *Report) string {
	t.Helper()
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// builtBinaries builds the services and the fleetworker once for every
// test of the binary; TestMain removes them.
func builtBinaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "dts-bench-bin-"); buildErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			buildErr = buildBinaries(ctx, binDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// TestQuickFleet runs 6 workers of 8 slots, three to a fleetworker
// process: every worker registers under its own id and takes part in the
// drain, the sustained load keeps flowing, and the report lists the two
// processes. It also profiles the sustained window: every process writes
// a CPU profile.
func TestQuickFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs a cluster")
	}
	t.Parallel()
	db := pgtest.NewDatabase(t)
	cfg := testCluster(t, db)
	cfg.Scenarios = []string{ScenarioDrain, ScenarioSustained}
	cfg = Quick(cfg)
	cfg.Workers, cfg.WorkersPerProcess, cfg.Concurrency = 6, 3, 8
	cfg.DrainJobs = 600
	cfg.ProfileDir = t.TempDir()
	rep := runQuick(t, cfg, 2*time.Minute)
	ctx := t.Context()
	if d := rep.Drain; d == nil || d.Completed != int64(cfg.DrainJobs) {
		t.Fatalf("drain: %+v, want all %d jobs completed", d, cfg.DrainJobs)
	}
	for _, name := range []string{"worker-1", "worker-2"} {
		if u := use(rep.Drain.Resources, name); u == nil || u.PeakRSSMB <= 0 {
			t.Errorf("drain resources: %s: %+v", name, u)
		}
	}
	// The sustained load is bounded by the unfinished jobs, counted by the
	// workers' completion counters: the fleetworker must serve them, or
	// the clients stop at the bound for good.
	if s := rep.Sustained; s == nil || s.Submitted == 0 || s.CompletedRate <= 0 {
		t.Errorf("sustained: %+v; want jobs submitted and completed in the window", s)
	}
	if !rep.Settings.Profiled {
		t.Errorf("report settings %+v do not say the run was profiled", rep.Settings)
	}
	for _, name := range []string{"submitter", "coordinator", "worker-1", "worker-2"} {
		for _, ext := range []string{".pprof", ".allocs-start", ".allocs-end"} {
			b, err := os.ReadFile(filepath.Join(cfg.ProfileDir, "sustained-"+name+ext))
			if err != nil {
				t.Errorf("profile of %s: %v", name, err)
			} else if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) { // pprof's profiles are gzipped
				t.Errorf("profile %s%s: %d bytes that are no gzipped profile: %.40q", name, ext, len(b), b)
			}
		}
	}
	if u := use(rep.Drain.Resources, "worker-3"); u != nil {
		t.Errorf("drain resources list a third worker process: %+v", u)
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT DISTINCT worker_id FROM jobs WHERE worker_id IS NOT NULL ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"worker-1-0", "worker-1-1", "worker-1-2", "worker-2-0", "worker-2-1", "worker-2-2"}
	if !slices.Equal(ids, want) {
		t.Errorf("jobs ran on workers %v; want each of %v", ids, want)
	}
}

// TestQuickLeanFleet runs 30 lean simulated workers of 8 slots, 15 to a
// fleetworker process: each registers under its own id, the drain's jobs
// are spread over them and all complete, and the sustained window counts
// completions by the lean fleet's counter.
func TestQuickLeanFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs a cluster")
	}
	t.Parallel()
	db := pgtest.NewDatabase(t)
	cfg := testCluster(t, db)
	cfg.Scenarios = []string{ScenarioDrain, ScenarioSustained}
	cfg = Quick(cfg)
	cfg.Workers, cfg.WorkersPerProcess, cfg.Concurrency, cfg.LeanFleet = 30, 15, 8, true
	cfg.DrainJobs = 3000
	rep := runQuick(t, cfg, 2*time.Minute)
	ctx := t.Context()
	if d := rep.Drain; d == nil || d.Completed != int64(cfg.DrainJobs) {
		t.Fatalf("drain: %+v, want all %d jobs completed", d, cfg.DrainJobs)
	}
	if s := rep.Sustained; s == nil || s.Submitted == 0 || s.CompletedRate <= 0 {
		t.Errorf("sustained: %+v; want jobs submitted and completed in the window", s)
	}
	if !rep.Settings.LeanFleet {
		t.Errorf("report settings %+v do not say the fleet was lean", rep.Settings)
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Every job completed once, by a worker of the fleet, and the fleet's
	// heartbeats kept every one of them registered: no lease ran out.
	var workers, notCompleted, retried int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT worker_id), count(*) FILTER (WHERE status <> 'completed'),
		count(*) FILTER (WHERE attempts <> 1) FROM jobs`).Scan(&workers, &notCompleted, &retried); err != nil {
		t.Fatal(err)
	}
	if workers < 20 || notCompleted != 0 || retried != 0 {
		t.Errorf("jobs ran on %d workers (want most of the 30), %d not completed, %d retried (want 0, 0)", workers, notCompleted, retried)
	}
}

// TestQuickShapes runs drain, sustained and latency with the three
// experiment flags at small sizes: 2 KiB payloads, a mixed fleet of 3
// groups (one worker each, in fleetworker processes), 50 limit keys with a
// job waiting. Each flag's promise is checked in PostgreSQL: the payload
// stored on every drain and sustained job, every group's name completed by
// a worker of its group only, the keys' second jobs still waiting and left
// out of the counts.
func TestQuickShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs a cluster")
	}
	t.Parallel()
	db := pgtest.NewDatabase(t)
	cfg := testCluster(t, db)
	cfg.Scenarios = []string{ScenarioDrain, ScenarioSustained, ScenarioLatency}
	cfg.NoHalfMax = true
	cfg.PayloadBytes = 2048
	cfg.JobGroups = 3
	cfg.LimitKeys = 50
	cfg = Quick(cfg)
	cfg.Workers = 3
	rep := runQuick(t, cfg, 2*time.Minute)
	ctx := t.Context()
	out := table(t, rep)
	t.Logf("\n%s", out)

	// The keys' jobs are not counted: exactly the drained jobs completed,
	// and the backlog was empty before the sustained load.
	if d := rep.Drain; d == nil || d.Completed != int64(cfg.DrainJobs) || d.FirstFinishSeconds < 0 {
		t.Fatalf("drain: %+v, want exactly the %d drained jobs completed", d, cfg.DrainJobs)
	}
	if s := rep.Sustained; s == nil || s.Submitted == 0 || s.CompletedRate <= 0 || s.BacklogEnd < 0 {
		t.Errorf("sustained: %+v", s)
	}
	if len(rep.Latency) != 1 || rep.Latency[0].SubmitToStart.N == 0 {
		t.Errorf("latency: %+v, want one run whose jobs started", rep.Latency)
	}
	st := rep.Settings
	if st.PayloadBytes != 2048 || st.JobGroups != 3 || st.LimitKeys != 50 || len(st.SubmitterEnv) != 0 {
		t.Errorf("settings %+v do not give the run's shape", st)
	}
	for _, want := range []string{"SHAPE", "2,048-byte payload", "3 groups", "50 concurrency-limit keys", "LIMIT KEYS", "GROUPS"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}

	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	query := func(sql string, args ...any) map[string]int64 {
		t.Helper()
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int64{}
		for rows.Next() {
			var k string
			var n int64
			if err := rows.Scan(&k, &n); err != nil {
				t.Fatal(err)
			}
			m[k] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}

	// Limit keys: each key's first job completed, its second still waits.
	limited := query(`SELECT status, count(*) FROM jobs WHERE limit_key LIKE 'bench-key-%' GROUP BY status`)
	if want := map[string]int64{"completed": 50, "pending": 50}; !maps.Equal(limited, want) {
		t.Errorf("limited jobs by status: %v, want %v", limited, want)
	}
	if l := rep.Limits; l == nil || l.Keys != 50 || l.WaitingEnd != 50 {
		t.Errorf("limit setup: %+v", l)
	}

	// Payloads: every unlimited job but the latency scenario's carries the
	// 2,048 bytes; at least the drained and the sustained window's jobs.
	sizes := query(`SELECT CASE WHEN jsonb_typeof(payload) = 'string' THEN octet_length(payload::text) ELSE 0 END::text, count(*)
		FROM jobs WHERE limit_key IS NULL GROUP BY 1`)
	latencyJobs := int64(rep.Latency[0].Submitted)
	if sizes["0"] != latencyJobs || len(sizes) != 2 || sizes["2048"] < int64(cfg.DrainJobs)+rep.Sustained.Submitted {
		t.Errorf("unlimited jobs by payload size: %v; want %d latency jobs without one and at least %d of 2048 bytes",
			sizes, latencyJobs, int64(cfg.DrainJobs)+rep.Sustained.Submitted)
	}

	// Stored at full size: a payload PostgreSQL compresses would cost it
	// less than a real one.
	var stored int64
	if err := conn.QueryRow(ctx, `SELECT min(pg_column_size(payload)) FROM jobs WHERE jsonb_typeof(payload) = 'string'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored < 2048 {
		t.Errorf("a 2048-byte payload takes %d bytes in PostgreSQL: it compresses", stored)
	}

	// Groups: worker-<seq>-0 is the only worker of fleet k's process seq
	// = 3k + g + 1, so it is in group g = (seq-1) mod 3.
	byWorker := query(`SELECT name || ' ' || worker_id, count(*) FROM jobs WHERE status = 'completed' AND limit_key IS NULL GROUP BY 1`)
	perName := map[string]int64{}
	for k, n := range byWorker {
		name, worker, _ := strings.Cut(k, " ")
		var seq int
		if _, err := fmt.Sscanf(worker, "worker-%d-0", &seq); err != nil {
			t.Fatalf("worker id %q: %v", worker, err)
		}
		if want := fmt.Sprintf("noop_g%d", (seq-1)%3); name != want {
			t.Errorf("%d jobs %s completed by %s, a worker of %s", n, name, worker, want)
		}
		perName[name] += n
	}
	for g := range 3 {
		if name := fmt.Sprintf("noop_g%d", g); perName[name] == 0 {
			t.Errorf("no job %s completed: %v", name, perName)
		}
	}
	if len(rep.Groups) != 3 {
		t.Fatalf("report groups: %+v, want 3", rep.Groups)
	}
	for _, g := range rep.Groups {
		if g.Completed != perName[g.Name] || g.ByOthers != 0 || g.Workers != 1 {
			t.Errorf("report group %+v; PostgreSQL counts %d completed", g, perName[g.Name])
		}
	}
}

// TestJobShape checks that batches of large payloads fit the submitter's
// batch body limit, and that group names spread evenly over batches.
func TestJobShape(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 100, 10 << 10, 1 << 20} {
		s := newJobShape(Config{PayloadBytes: n, JobGroups: 50})
		k := s.fitBatch(1000)
		if got := len(s.job(49)); got != s.longestJob() {
			t.Errorf("payload %d: the longest job is %d bytes, longestJob says %d", n, got, s.longestJob())
		}
		if k < 1 {
			t.Errorf("payload %d: %d jobs to a batch", n, k)
			continue
		}
		if b := s.body(49, k); len(b) > maxBatchBody {
			t.Errorf("payload %d: a batch of %d is %d bytes, over %d", n, k, len(b), maxBatchBody)
		}
		if b := s.body(49, k+1); k < 1000 && len(b) <= maxBatchBody {
			t.Errorf("payload %d: %d jobs to a batch, but %d fit (%d bytes)", n, k, k+1, len(b))
		}
		if n > 10<<10 {
			continue // decoding megabytes is slow under -race
		}
		var jobs []struct {
			Name    string `json:"name"`
			Payload string `json:"payload"`
		}
		if err := json.Unmarshal(s.body(0, min(k, 3)), &jobs); err != nil || len(jobs[0].Payload) != n-2 {
			t.Errorf("payload %d: batch does not decode to its payload: %v", n, err)
		}
	}
	if err := (Config{DatabaseURL: "x", RedisURL: "x", PayloadBytes: maxBatchBody}).WithDefaults().validate(); err == nil {
		t.Error("validate accepts a payload larger than the batch body limit")
	}

	// 7 jobs to a batch over 3 names: any 3 consecutive batches hold each
	// name 7 times.
	b := newBatches(jobShape{names: groupNames(3)}, 7)
	counts := map[string]int{}
	for k := range int64(3) {
		var jobs []struct{ Name string }
		if err := json.Unmarshal(b.body(k+5, 7), &jobs); err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			counts[j.Name]++
		}
	}
	if want := map[string]int{"noop_g0": 7, "noop_g1": 7, "noop_g2": 7}; !maps.Equal(counts, want) {
		t.Errorf("names over 3 batches: %v, want %v", counts, want)
	}
	if got := string(jobShape{names: groupNames(0)}.body(0, 2)); got != "["+noopJob+","+noopJob+"]" {
		t.Errorf("the standard shape's batch is %s", got)
	}
}

// TestQuickLinkLatency runs drain and latency with 1 ms between the
// components (LinkLatency): the jobs complete, a round trip to either store
// through its proxy takes at least the two crossings, and the coordinator's
// own claim statement and Redis delivery pay them too (a coordinator that
// bypassed the proxies would measure a fraction of a millisecond).
func TestQuickLinkLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs a cluster")
	}
	t.Parallel()
	rep, out := runQuickLink(t, []string{ScenarioDrain, ScenarioLatency}, func(cfg *Config) { cfg.LinkLatency = time.Millisecond })
	if len(rep.Latency) != 1 || rep.Latency[0].SubmitToStart.N == 0 {
		t.Fatalf("latency: %+v, want one run whose jobs started", rep.Latency)
	}
	l := rep.Link
	if l == nil {
		t.Fatal("no link in the report")
	}
	if l.LatencyMS != 1 || rep.Settings.LinkLatencyMS != 1 {
		t.Errorf("link %+v, settings %+v: want 1 ms", l, rep.Settings)
	}
	var want []string
	for _, px := range []string{"postgres", "redis"} {
		for _, stream := range []string{"downstream", "upstream"} {
			want = append(want, fmt.Sprintf("%s/latency_%s: latency %s jitter=0 latency=1", px, stream, stream))
		}
	}
	if !slices.Equal(l.Toxics, want) {
		t.Errorf("toxics %q, want %q", l.Toxics, want)
	}
	if l.PostgresRoundTripMS < 2 || l.RedisRoundTripMS < 2 {
		t.Errorf("round trips through the proxies: PostgreSQL %.2f ms, Redis %.2f ms; want at least 2 ms each (1 ms each way)",
			l.PostgresRoundTripMS, l.RedisRoundTripMS)
	}
	// The coordinator times its claim statement and its delivery to Redis:
	// each is at least a round trip over the link.
	if lr := rep.Latency[0]; lr.MetricsClaimMs < 2 || lr.MetricsDeliverMs < 2 {
		t.Errorf("coordinator's mean claim %.2f ms, delivery %.2f ms; want at least 2 ms each: it bypassed the proxies",
			lr.MetricsClaimMs, lr.MetricsDeliverMs)
	}
	for _, want := range []string{"SHAPE", "toxiproxy, 1 ms latency each way", "LINK", "postgres/latency_upstream: latency upstream"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

// TestQuickLinkProxy runs a drain with the proxies of LinkLatency and no
// latency (LinkProxy): the jobs complete, the report names the proxies,
// and toxiproxy reports no toxic on them. (A round trip's time would say
// little here: on a loaded machine one through the bare proxies has taken
// more than the 2 ms a 1 ms toxic adds.)
func TestQuickLinkProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs a cluster")
	}
	t.Parallel()
	rep, out := runQuickLink(t, []string{ScenarioDrain}, func(cfg *Config) { cfg.LinkProxy = true })
	l := rep.Link
	if l == nil || !rep.Settings.LinkProxy || rep.Settings.LinkLatencyMS != 0 {
		t.Fatalf("link %+v, settings %+v: want the proxies without latency", l, rep.Settings)
	}
	if len(l.Toxics) != 0 {
		t.Errorf("toxics on the bare proxies: %q", l.Toxics)
	}
	if !strings.Contains(out, "through toxiproxy, no latency added") {
		t.Error("the table does not say the services went through the proxies")
	}
	if !slices.ContainsFunc(rep.Drain.Resources.Procs, func(p ResourceUse) bool { return p.Name == "toxiproxy" }) {
		t.Errorf("the drain's resources do not count toxiproxy: %+v", rep.Drain.Resources.Procs)
	}
}

// runQuickLink runs Quick's scenarios with the link that link sets, logs
// the table and checks that every drained job completed.
func runQuickLink(t *testing.T, scenarios []string, link func(*Config)) (*Report, string) {
	t.Helper()
	cfg := testCluster(t, pgtest.NewDatabase(t))
	cfg.Scenarios = scenarios
	link(&cfg)
	cfg = Quick(cfg)
	rep := runQuick(t, cfg, 2*time.Minute)
	out := table(t, rep)
	t.Logf("\n%s", out)
	if d := rep.Drain; d == nil || d.Completed != int64(cfg.DrainJobs) {
		t.Fatalf("drain: %+v, want the %d jobs completed", d, cfg.DrainJobs)
	}
	return rep, out
}
