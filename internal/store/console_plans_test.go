package store_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/store/storetest"
)

// consoleFixtureJobs is the size of the table TestConsoleListPlans plans
// on: the console issue's million jobs (the same fixture as
// submitter/ui's BenchmarkConsole1M; filling it takes about 15 s here).
const consoleFixtureJobs = 1_000_000

// TestConsoleListPlans: on a table of 1,000,000 jobs in mixed states,
// VACUUMed and ANALYZEd, no list query of the console runs a sequential
// scan of jobs, with each filter the Jobs page offers (state, queue, name
// and their combinations; the first page and a later one), nor those of
// the Dead letters (its list and its groups; a group's jobs, count and
// batches), Scheduled, Queues and Workers pages, the Overview's due count,
// a job by id or key, a step of a payload search, and the count of the
// all-matching confirmation. (The Overview's count of jobs by state does read the
// whole table: the refresher runs it, never a request; docs/benchmarks.md.)
// Plans are made as the submitter's sessions make them: generic
// (store.Open sets plan_cache_mode), so a partial index serves a filter
// only if the plan may use it whatever the parameters.
func TestConsoleListPlans(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fills a million-job table: make test runs it, make test-short does not")
	}
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	fx, err := storetest.FillJobs(ctx, url, consoleFixtureJobs)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The submitter's session settings (store.Open): generic plans, and
	// no JIT, which would not change a plan but would compile each count
	// below for up to a second.
	for _, set := range []string{`SET plan_cache_mode = force_generic_plan`, `SET jit = off`} {
		if _, err := conn.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	mid := (fx.FirstID + fx.LastID) / 2
	ts := time.Now().Add(-3 * 24 * time.Hour).UTC().Format(time.RFC3339Nano)
	type plan struct {
		what, query string
		args        []any // nil is NULL
		txSetup     string
	}
	var plans []plan
	// Jobs: every filter of the search box, alone and together, on the
	// first page (before = max) and deep (before = the middle id).
	for _, before := range []int64{1<<63 - 1, mid} {
		for _, f := range []struct{ state, name, queue string }{
			{}, {state: "pending"}, {state: "leased"}, {state: "retrying"}, {state: "completed"}, {state: "failed"}, {state: "canceled"},
			{queue: "reports"}, {name: "report"}, {name: "rare_job"}, {state: "failed", queue: "mail"}, {state: "pending", name: "webhook", queue: "low"},
		} {
			plans = append(plans, plan{what: fmt.Sprintf("Jobs %+v before %d", f, before), query: store.Q("JobList"),
				args: []any{before, f.state, f.name, pageLimit, f.queue}})
		}
	}
	plans = append(plans,
		plan{what: "Dead letters, first page", query: store.Q("DeadListPage"), args: []any{nil, nil, pageLimit, ""}},
		plan{what: "Dead letters, later page", query: store.Q("DeadListPage"), args: []any{ts, mid, pageLimit, ""}},
		plan{what: "Dead letters of a queue, first page", query: store.Q("DeadListPage"), args: []any{nil, nil, pageLimit, "mail"}},
		plan{what: "Dead letters of a queue, later page", query: store.Q("DeadListPage"), args: []any{ts, mid, pageLimit, "mail"}},
		plan{what: "Scheduled, first page", query: store.Q("JobListScheduled"), args: []any{nil, nil, pageLimit}},
		plan{what: "Scheduled, later page", query: store.Q("JobListScheduled"), args: []any{ts, mid, pageLimit}},
		plan{what: "Workers' leased jobs", query: store.Q("WorkerLeasedJobs")},
		plan{what: "Queues", query: store.Q("QueueStatsList"), txSetup: store.Q("QueueStatsListSeqscanOff")},
		plan{what: "Payload search, one step", query: store.Q("JobSearchStep"),
			args: []any{mid, "", "", pageLimit, "", mid - store.DefaultSearchSpan, "customer 42", "", nil, "", "", ""}},
		plan{what: "Payload search, one step with filters", query: store.Q("JobSearchStep"),
			args: []any{mid, "failed", "report", pageLimit, "mail", mid - store.DefaultSearchSpan, "customer 42", "", nil, "", "", ""}},
		plan{what: "Search by payload path, worker and error, one step", query: store.Q("JobSearchStep"),
			args: []any{mid, "", "", pageLimit, "", mid - store.DefaultSearchSpan, "", "", []string{"user"}, "u1", "w3", "not found"}},
		plan{what: "Overview's due jobs", query: store.Q("StatsGetDue"), txSetup: store.Q("StatsGetSeqscanOff")},
		plan{what: "Job", query: store.Q("JobGet"), args: []any{mid}},
		plan{what: "Job by key", query: store.Q("JobGetByKey"), args: []any{fx.Key}},
		plan{what: "Job timeline: the job", query: store.Q("JobTimelineGetJob"), args: []any{fx.ManyAttempts}},
		plan{what: "Job timeline: its events", query: store.Q("JobTimelineGetEvents"), args: []any{fx.ManyAttempts, store.MaxTimelineEvents}},
		plan{what: "Job timeline: its audit rows", query: store.Q("JobTimelineGetAudit"),
			args: []any{strconv.FormatInt(fx.ManyAttempts, 10), store.MaxTimelineAudit}},
		plan{what: "Dead letters' groups", query: store.Q("DeadGroups"), args: []any{50}},
	)
	// A dead-letter group's jobs (its link on Dead letters), first page
	// and deep, and the confirmation and the batches of its Requeue all,
	// for a large group and a small one.
	for _, g := range []struct{ name, fp string }{{"send_email", "timeout after <dur>"}, {"report", "HTTP <n> from <url>"}} {
		for _, before := range []int64{1<<63 - 1, mid} {
			plans = append(plans, plan{what: fmt.Sprintf("Jobs of the dead group %+v before %d", g, before), query: store.Q("JobListDeadGroup"),
				args: []any{before, "failed", g.name, pageLimit, "", g.fp}})
		}
		plans = append(plans,
			plan{what: fmt.Sprintf("all matching the dead group %+v", g), query: store.Q("OperationCountDeadGroup"),
				args: []any{[]string{"failed"}, g.name, "", false, g.fp}},
			plan{what: fmt.Sprintf("a batch of the dead group %+v", g), query: store.Q("OperationStepSelectDeadGroup"),
				args: []any{mid, []string{"failed"}, g.name, "", false, 1000, g.fp}})
	}
	// The confirmation of an all-matching action counts what it would
	// change: requeue (failed) and cancel (waiting, pending, retrying,
	// leased), any name and queue.
	for _, st := range [][]string{{"failed"}, {"waiting", "pending", "retrying", "leased"}, {"pending"}, {"leased"}, {"waiting"}} {
		for _, f := range []struct{ name, queue string }{{}, {name: "report"}, {queue: "mail"}} {
			plans = append(plans, plan{what: fmt.Sprintf("all matching %v %+v", st, f), query: store.Q("OperationCount"),
				args: []any{st, f.name, f.queue, len(st) > 1}})
		}
	}
	for i, p := range plans {
		lines := explainGeneric(t, conn, fmt.Sprintf("p%d", i), p.query, p.args, p.txSetup)
		text := strings.Join(lines, "\n")
		if seqScanRan(lines) {
			t.Errorf("%s: a sequential scan of jobs:\n%s", p.what, text)
		} else {
			t.Logf("%s:\n%s", p.what, text)
		}
	}
}

// seqScanRan says whether an EXPLAIN ANALYZE shows a sequential scan of
// jobs that ran (a branch its one-time filter skips says "never
// executed").
func seqScanRan(lines []string) bool {
	for _, l := range lines {
		if strings.Contains(l, "Seq Scan on jobs") && !strings.Contains(l, "(never executed)") {
			return true
		}
	}
	return false
}

// pageLimit is what the console asks a list for: a page of 50 and one
// more, to know whether there is a next.
const pageLimit = 51

// explainGeneric prepares query as name and runs it with args under
// EXPLAIN ANALYZE, so that its generic plan is shown with the branches
// that ran; setup runs first in the same transaction when given.
func explainGeneric(t *testing.T, conn *pgx.Conn, name, query string, args []any, setup string) []string {
	t.Helper()
	ctx := t.Context()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if setup != "" {
		if _, err := tx.Exec(ctx, setup); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+query); err != nil {
		t.Fatalf("prepare %s: %v", query, err)
	}
	defer func() { _, _ = conn.Exec(ctx, "DEALLOCATE "+name) }()
	stmt := "EXPLAIN (ANALYZE, TIMING OFF) EXECUTE " + name
	if len(args) > 0 {
		lits := make([]string, len(args))
		for i, a := range args {
			lits[i] = literal(a)
		}
		stmt += "(" + strings.Join(lits, ", ") + ")"
	}
	rows, err := tx.Query(ctx, stmt)
	if err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	return lines
}

// literal writes a test's argument as SQL (the values are the test's own).
func literal(a any) string {
	switch v := a.(type) {
	case nil:
		return "NULL"
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case []string:
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = literal(s)
		}
		return "ARRAY[" + strings.Join(q, ", ") + "]::text[]"
	default:
		return fmt.Sprint(v)
	}
}
