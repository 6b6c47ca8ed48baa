package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/netns"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/testwait"
)

// TestChaosHosts runs the whole system with every component on a host of
// its own (hostCluster) and, one after another, cuts or degrades the links
// between hosts while a load generator submits jobs through the
// submitter. After each fault is healed it waits until every job accepted
// so far has completed, and measures the recovery. At the end it checks,
// over every job answered 201:
//
//   - none is lost: each one completes;
//   - no stale result is applied: each completed under the last lease it
//     was given, and that lease ended in no other way;
//   - no healthy job is failed by the system: no handler fails, so no job
//     may end failed;
//   - at most one leader writes per epoch: every UPDATE of jobs made by a
//     coordinator is made by the one coordinator_leader names for the
//     epoch in force (a trigger the test installs records each one);
//
// and prints a table of the faults. The partitions run on one such
// cluster and the toxiproxy faults on another, at the same time: the
// fifteen faults one after another on a single cluster made this the
// suite's longest test by far. DTS_CHAOS_LONG=1 (make chaos) holds each
// fault longer under more load; DTS_CHAOS_FAULTS=REGEXP runs only the
// faults whose name matches.
func TestChaosHosts(t *testing.T) {
	t.Parallel()
	cfg := chaosShort
	if os.Getenv("DTS_CHAOS_LONG") != "" {
		cfg = chaosLong
	}
	var only *regexp.Regexp
	if v := os.Getenv("DTS_CHAOS_FAULTS"); v != "" {
		only = regexp.MustCompile(v)
	}
	// Not t.Parallel subtests: those would wait for a free slot again,
	// behind every test that started after this one.
	var wg sync.WaitGroup
	for _, family := range []string{familyPartition, familyToxic} {
		wg.Go(func() {
			t.Run(family, func(t *testing.T) { runChaos(t, cfg, only, family) })
		})
	}
	wg.Wait()
}

// The families of faults; each runs on a cluster of its own.
const (
	familyPartition = "partitions" // iptables between two hosts
	familyToxic     = "toxics"     // toxiproxy on a link
)

// runChaos runs the faults of family that only matches (nil: all) on a
// cluster of their own, under load, then checks every job answered 201.
func runChaos(t *testing.T, cfg chaosConfig, only *regexp.Regexp, family string) {
	// chaosFaults reads the cluster only when a fault is applied, so the
	// list can be filtered before one is started.
	if !slices.ContainsFunc(chaosFaults(nil), func(f fault) bool {
		return f.family == family && (only == nil || only.MatchString(f.name))
	}) {
		t.Skipf("no fault of the %s matches DTS_CHAOS_FAULTS", family)
	}
	h := startHostCluster(t)
	ctx := ctxT(t, 30*time.Minute)
	db := h.db(ctx)
	installWriteRecorder(t, ctx, db)

	load := startChaosLoad(h.cluster, cfg.rate)
	defer load.stop()
	// Warm-up: every worker has completed a job before the first fault.
	h.eventually(60*time.Second, "a job completed by each worker", func() bool {
		var n int
		err := db.QueryRow(ctx, "SELECT count(DISTINCT worker_id) FROM jobs WHERE status = 'completed' AND worker_id = ANY($1)",
			[]string{hostWorkerA, hostWorkerB, hostWorkerC}).Scan(&n)
		return err == nil && n == 3
	})

	var rows []faultRow
	for _, f := range chaosFaults(h) {
		if f.family != family || only != nil && !only.MatchString(f.name) {
			continue
		}
		row := runFault(t, ctx, h, db, load, f, cfg)
		rows = append(rows, row)
		if t.Failed() {
			break
		}
	}
	ids, refused := load.stop()
	printFaultTable(t, cfg, rows)
	checkChaos(t, ctx, h, db, ids, refused)
}

// chaosConfig is how long each fault lasts and how much load runs.
type chaosConfig struct {
	name     string
	hold     time.Duration // how long a fault lasts
	rate     int           // submissions per second
	recovery time.Duration // the bound on every job accepted before the heal completing after it
}

var (
	// recovery is above LEASE_DURATION (30 s): a job whose claim committed
	// but whose answer the leader never got (a half-open or reset link to
	// PostgreSQL) is delivered to nobody, and runs once its lease runs out.
	chaosShort = chaosConfig{name: "short", hold: 3 * time.Second, rate: 40, recovery: 60 * time.Second}
	chaosLong  = chaosConfig{name: "long", hold: 20 * time.Second, rate: 100, recovery: 120 * time.Second}
)

// fault is one fault between hosts: apply starts it (choosing its target
// then, e.g. whichever coordinator leads) and returns what heals it.
type fault struct {
	name   string
	family string // familyPartition or familyToxic
	apply  func() (target string, heal func() error, err error)
}

// chaosFaults lists the faults in the order they run.
func chaosFaults(h *hostCluster) []fault {
	host := func(name string) func() (*netns.Host, string) {
		return func() (*netns.Host, string) { return h.hosts[name], name }
	}
	leader := func() (*netns.Host, string) {
		l, _, ok := h.steadyLeader()
		if !ok {
			return nil, ""
		}
		return h.hosts[l.name], l.name
	}
	standby := func() (*netns.Host, string) {
		_, s, ok := h.steadyLeader()
		if !ok {
			return nil, ""
		}
		return h.hosts[s.name], s.name
	}
	partition := func(name string, a func() (*netns.Host, string), b string, oneWay bool) fault {
		return fault{name: name, family: familyPartition, apply: func() (string, func() error, error) {
			ha, an := a()
			if ha == nil {
				return "", nil, fmt.Errorf("no single leader")
			}
			hb := h.hosts[b]
			cut := h.net.Partition
			arrow := "<->"
			if oneWay {
				cut, arrow = h.net.PartitionOneWay, "->"
			}
			if err := cut(ha, hb); err != nil {
				return "", nil, err
			}
			return an + arrow + b, func() error { return h.net.Heal(ha, hb) }, nil
		}}
	}
	// toxic adds a toxic to the proxy of a's link to server.
	toxic := func(name string, a func() (*netns.Host, string), server, typ, stream string, attrs map[string]any) fault {
		return fault{name: name, family: familyToxic, apply: func() (string, func() error, error) {
			ha, an := a()
			if ha == nil {
				return "", nil, fmt.Errorf("no single leader")
			}
			x, proxy := h.toxi[server], proxyName(an, server)
			if err := x.addToxic(proxy, "fault", typ, stream, attrs); err != nil {
				return "", nil, err
			}
			return proxy + " " + typ, func() error { return x.removeToxic(proxy, "fault") }, nil
		}}
	}
	return []fault{
		partition("leader-postgres partition", leader, hostPG, false),
		partition("standby-postgres partition", standby, hostPG, false),
		partition("leader-redis partition", leader, hostRedis, false),
		partition("submitter-postgres partition", host(hostSubmitter), hostPG, false),
		partition("submitter-redis partition", host(hostSubmitter), hostRedis, false),
		partition("worker-redis partition", host(hostWorkerA), hostRedis, false),
		partition("worker->redis one-way partition", host(hostWorkerC), hostRedis, true),
		toxic("worker-redis latency 200ms", host(hostWorkerA), hostRedis, "latency", "downstream", map[string]any{"latency": 200}),
		toxic("worker-redis resets", host(hostWorkerA), hostRedis, "reset_peer", "upstream", map[string]any{"timeout": 0}),
		toxic("worker-redis bandwidth 8KB/s", host(hostWorkerA), hostRedis, "bandwidth", "downstream", map[string]any{"rate": 8}),
		toxic("worker-redis half-open", host(hostWorkerA), hostRedis, "timeout", "downstream", map[string]any{"timeout": 0}),
		toxic("leader-postgres latency 200ms", leader, hostPG, "latency", "downstream", map[string]any{"latency": 200}),
		toxic("leader-postgres resets", leader, hostPG, "reset_peer", "upstream", map[string]any{"timeout": 0}),
		toxic("leader-postgres bandwidth 8KB/s", leader, hostPG, "bandwidth", "downstream", map[string]any{"rate": 8}),
		toxic("leader-postgres half-open", leader, hostPG, "timeout", "downstream", map[string]any{"timeout": 0}),
	}
}

// faultRow is what one fault did.
type faultRow struct {
	name, target        string
	held                time.Duration
	accepted, refused   int           // submissions sent while it lasted answered 201, and not
	first201            time.Duration // heal to the first 201 after it
	firstDone           time.Duration // heal to the first job completed after it
	allDone             time.Duration // heal to the last job accepted before the heal completed (0: all done before)
	retried, staleEvent int           // jobs sent during the fault with more than one attempt; stale results rejected
	epochs              string        // leader epoch before -> after
}

// runFault applies f for cfg.hold, heals it, and waits until every job
// accepted before the heal has completed.
func runFault(t *testing.T, ctx context.Context, h *hostCluster, db *pgx.Conn, load *chaosLoad, f fault, cfg chaosConfig) faultRow {
	t.Helper()
	// Start from a steady system: one leader.
	h.eventually(30*time.Second, "one leader before "+f.name, func() bool { _, _, ok := h.leader(); return ok })
	epochBefore := currentEpoch(t, ctx, db)
	var staleBefore int
	_ = db.QueryRow(ctx, "SELECT count(*) FROM job_events WHERE kind = 'stale_result'").Scan(&staleBefore)

	start := time.Now()
	target, heal, err := f.apply()
	if err != nil {
		t.Fatalf("%s: %v", f.name, err)
	}
	select {
	case <-time.After(cfg.hold):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if err := heal(); err != nil {
		t.Fatalf("heal %s: %v", f.name, err)
	}
	healed := time.Now()
	row := faultRow{name: f.name, target: target, held: healed.Sub(start)}
	row.accepted, row.refused = load.during(start, healed)

	before := load.acceptedIDsBefore(healed)
	var lastDone *time.Time
	var broken string // a guarantee broken: no use waiting on
	err = testwait.Until(t, cfg.recovery, func() error {
		var n, done, failed int
		if err := db.QueryRow(ctx, `
			SELECT count(*), count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'failed'),
			       max(finished_at)
			FROM jobs WHERE id = ANY($1)`, before).Scan(&n, &done, &failed, &lastDone); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		switch {
		case n != len(before):
			broken = fmt.Sprintf("%d of the %d jobs answered 201 before the heal are in PostgreSQL", n, len(before))
		case failed > 0:
			broken = fmt.Sprintf("%d healthy jobs failed", failed)
		case done != n:
			return fmt.Errorf("%d of %d jobs accepted before the heal still not completed %v after it", n-done, n, cfg.recovery)
		}
		return nil
	})
	if broken == "" && err != nil {
		broken = err.Error()
	}
	if broken != "" {
		t.Errorf("%s: %s", f.name, broken)
		return row
	}
	if lastDone != nil && lastDone.After(healed) {
		row.allDone = lastDone.Sub(healed)
	}
	var firstDone *time.Time
	h.eventually(cfg.recovery, "a job completed after the heal of "+f.name, func() bool {
		err := db.QueryRow(ctx, "SELECT min(finished_at) FROM jobs WHERE finished_at > $1", healed).Scan(&firstDone)
		return err == nil && firstDone != nil
	})
	row.firstDone = firstDone.Sub(healed)
	h.eventually(cfg.recovery, "a submission accepted after the heal of "+f.name, func() bool {
		return !load.firstAcceptedAfter(healed).IsZero()
	})
	row.first201 = load.firstAcceptedAfter(healed).Sub(healed)
	if err := db.QueryRow(ctx, "SELECT count(*) FROM jobs WHERE id = ANY($1) AND attempts > 1", load.sentIDsBetween(start, healed)).Scan(&row.retried); err != nil {
		t.Fatal(err)
	}
	var staleAfter int
	_ = db.QueryRow(ctx, "SELECT count(*) FROM job_events WHERE kind = 'stale_result'").Scan(&staleAfter)
	row.staleEvent = staleAfter - staleBefore
	row.epochs = fmt.Sprintf("%d->%d", epochBefore, currentEpoch(t, ctx, db))
	t.Logf("%s (%s): held %v, %d accepted, %d refused; recovery: first 201 %v, first completion %v, all done %v",
		f.name, target, row.held.Round(time.Millisecond), row.accepted, row.refused,
		row.first201.Round(time.Millisecond), row.firstDone.Round(time.Millisecond), row.allDone.Round(time.Millisecond))
	return row
}

func currentEpoch(t *testing.T, ctx context.Context, db *pgx.Conn) int64 {
	t.Helper()
	var e int64
	if err := db.QueryRow(ctx, "SELECT epoch FROM coordinator_leader").Scan(&e); err != nil {
		t.Fatal(err)
	}
	return e
}

func printFaultTable(t *testing.T, cfg chaosConfig, rows []faultRow) {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "fault (%s run, %d/s)\ttarget\theld\taccepted\trefused\tfirst 201\tfirst completion\tall done\tretried\tstale rejected\tepoch\n", cfg.name, cfg.rate)
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%v\t%d\t%d\t%v\t%v\t%v\t%d\t%d\t%s\n", r.name, r.target, r.held.Round(100*time.Millisecond),
			r.accepted, r.refused, r.first201.Round(10*time.Millisecond), r.firstDone.Round(10*time.Millisecond),
			r.allDone.Round(10*time.Millisecond), r.retried, r.staleEvent, r.epochs)
	}
	w.Flush()
	t.Logf("faults between hosts (recovery times from the heal):\n%s", b.String())
}

// installWriteRecorder installs a statement trigger on jobs that records,
// for every UPDATE, who made it (application_name: each coordinator
// connects under its id) under which epoch, which coordinator
// coordinator_leader names for it, and every lease token it gave. A
// leader's write is fenced (dts_fence holds coordinator_leader's row FOR
// SHARE until commit), so the epoch the trigger reads is the one the write
// was made under.
func installWriteRecorder(t *testing.T, ctx context.Context, db *pgx.Conn) {
	t.Helper()
	if _, err := db.Exec(ctx, `
		CREATE TABLE chaos_writes (id bigserial PRIMARY KEY, app text, epoch bigint, leader text, rows integer);
		CREATE TABLE chaos_leases (id bigserial PRIMARY KEY, job_id bigint, token bigint, app text, epoch bigint);
		CREATE FUNCTION chaos_record() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE
			e bigint;
			l text;
			app text := current_setting('application_name');
		BEGIN
			SELECT epoch, leader_id INTO e, l FROM coordinator_leader WHERE id = 1;
			INSERT INTO chaos_writes (app, epoch, leader, rows) SELECT app, e, l, count(*) FROM new_rows HAVING count(*) > 0;
			INSERT INTO chaos_leases (job_id, token, app, epoch)
				SELECT n.id, n.lease_token, app, e FROM new_rows n JOIN old_rows o USING (id)
				WHERE n.lease_token IS NOT NULL AND n.lease_token IS DISTINCT FROM o.lease_token;
			RETURN NULL;
		END $$;
		CREATE TRIGGER chaos_record AFTER UPDATE ON jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
			FOR EACH STATEMENT EXECUTE FUNCTION chaos_record();`); err != nil {
		t.Fatalf("install the write recorder: %v", err)
	}
}

// checkChaos checks the guarantees over every job answered 201.
func checkChaos(t *testing.T, ctx context.Context, h *hostCluster, db *pgx.Conn, ids []int64, refused int) {
	t.Helper()
	// No accepted job lost: each one completes.
	lost := ""
	if err := testwait.Until(t, 60*time.Second, func() error {
		var n, done int
		if err := db.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE status = 'completed') FROM jobs WHERE id = ANY($1)", ids).Scan(&n, &done); err != nil {
			t.Fatal(err)
		}
		if n != len(ids) {
			lost = fmt.Sprintf("%d of the %d jobs answered 201 are not in PostgreSQL", len(ids)-n, len(ids))
			return nil
		}
		if done != n {
			return fmt.Errorf("%d of the %d jobs answered 201 never completed", n-done, n)
		}
		return nil
	}); err != nil {
		lost = err.Error()
	}
	if lost != "" {
		t.Errorf("lost: %s", lost)
	}
	// No healthy job failed by the system.
	failedRows, err := db.Query(ctx, `
		SELECT id, name, coalesce(dead_reason, ''), coalesce(last_error, ''), coalesce(worker_id, ''), attempts, errors::text
		FROM jobs WHERE id = ANY($1) AND status = 'failed' LIMIT 10`, ids)
	if err != nil {
		t.Fatal(err)
	}
	for failedRows.Next() {
		var id int64
		var attempts int
		var name, reason, lastErr, worker, errs string
		if err := failedRows.Scan(&id, &name, &reason, &lastErr, &worker, &attempts, &errs); err != nil {
			t.Fatal(err)
		}
		t.Errorf("healthy job %d (%s) failed on %s after %d attempts: %s %s; attempts: %s", id, name, worker, attempts, reason, lastErr, errs)
	}
	failedRows.Close()

	// No stale result applied.
	stale, example, err := staleCompletions(ctx, db, ids)
	if err != nil {
		t.Fatal(err)
	}
	if stale != 0 {
		t.Errorf("stale result applied: %d jobs completed under a lease that was not their last or also ended otherwise (e.g. job %d)", stale, example)
	}
	// At most one leader's writes per epoch.
	epochs, problems, err := epochWriters(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}

	var byWorker []string
	wrows, err := db.Query(ctx, "SELECT worker_id, count(*) FROM jobs WHERE id = ANY($1) AND status = 'completed' GROUP BY 1 ORDER BY 1", ids)
	if err != nil {
		t.Fatal(err)
	}
	for wrows.Next() {
		var w string
		var n int
		if err := wrows.Scan(&w, &n); err != nil {
			t.Fatal(err)
		}
		byWorker = append(byWorker, fmt.Sprintf("%s %d", w, n))
	}
	wrows.Close()
	var staleRejected int
	_ = db.QueryRow(ctx, "SELECT count(*) FROM job_events WHERE kind = 'stale_result'").Scan(&staleRejected)
	t.Logf("checked %d jobs answered 201 (%d submissions refused): completed by %s; writes by epoch: %s; stale results rejected: %d",
		len(ids), refused, strings.Join(byWorker, ", "), strings.Join(epochs, "; "), staleRejected)
}

// staleCompletions counts the jobs of ids that completed under a lease
// other than the last one they were given (chaos_leases), or under one that
// also ended otherwise (a reclaim, failure or hand-back with its token):
// a stale result applied. example is one of them.
func staleCompletions(ctx context.Context, db *pgx.Conn, ids []int64) (n int, example int64, err error) {
	var ex *int64
	err = db.QueryRow(ctx, `
		WITH last AS (
			SELECT DISTINCT ON (job_id) job_id, token FROM chaos_leases WHERE job_id = ANY($1) ORDER BY job_id, id DESC)
		SELECT count(*), min(j.id) FROM jobs j LEFT JOIN last ON last.job_id = j.id
		WHERE j.id = ANY($1) AND j.status = 'completed' AND (
		      last.token IS DISTINCT FROM j.last_lease_token
		   OR EXISTS (SELECT 1 FROM jsonb_array_elements(j.errors) e WHERE (e->>'token')::bigint = j.last_lease_token)
		   OR EXISTS (SELECT 1 FROM job_events v WHERE v.job_id = j.id AND v.kind = 'released' AND (v.detail->>'token')::bigint = j.last_lease_token))`,
		ids).Scan(&n, &ex)
	if ex != nil {
		example = *ex
	}
	return n, example, err
}

// epochWriters reads chaos_writes: summary has, per epoch, which
// coordinators wrote jobs and how many rows; problems names every epoch in
// which a coordinator other than the leader coordinator_leader named for
// it wrote jobs (two leaders' writes in one epoch, or a deposed leader's
// write landing in its successor's).
func epochWriters(ctx context.Context, db *pgx.Conn) (summary, problems []string, err error) {
	rows, err := db.Query(ctx, `
		SELECT epoch, string_agg(DISTINCT app, ',' ORDER BY app), string_agg(DISTINCT coalesce(leader, ''), ','), sum(rows)
		FROM chaos_writes WHERE app LIKE 'coord-%' GROUP BY epoch ORDER BY epoch`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var epoch, n int64
		var apps, leader string
		if err := rows.Scan(&epoch, &apps, &leader, &n); err != nil {
			return nil, nil, err
		}
		summary = append(summary, fmt.Sprintf("%d: %s (%d rows)", epoch, apps, n))
		if apps != leader {
			problems = append(problems, fmt.Sprintf("epoch %d: jobs were written by %s; its leader is %s", epoch, apps, leader))
		}
	}
	return summary, problems, rows.Err()
}

// chaosLoad submits jobs through the submitter at a steady rate, cycling
// through names each worker group serves, and records every 201 and when
// it came, and every refusal (an error status or no answer).
type chaosLoad struct {
	stopped chan struct{}
	once    sync.Once
	wg      sync.WaitGroup

	mu      sync.Mutex
	ids     []int64
	sent    []time.Time // when each 201's request was sent
	times   []time.Time // when each 201 came
	refused []time.Time // when each refused request was sent
}

// chaosJobs are the jobs the load cycles through: a built-in (worker-a or
// worker-c), the custom name (worker-b or worker-c), and a name only
// worker-c's "*" serves.
var chaosJobs = []map[string]any{
	{"name": "sleep", "payload": map[string]any{"seconds": 0.02}, "max_retries": 5},
	{"name": customJobName, "payload": "hello", "max_retries": 5},
	{"name": "noop", "max_retries": 5},
	{"name": "zz_other", "payload": "any", "max_retries": 5},
}

const chaosSenders = 4

func startChaosLoad(c *cluster, rate int) *chaosLoad {
	l := &chaosLoad{stopped: make(chan struct{})}
	client := &http.Client{Timeout: 5 * time.Second}
	interval := time.Second * chaosSenders / time.Duration(rate)
	for s := range chaosSenders {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for i := s; ; i += chaosSenders {
				select {
				case <-l.stopped:
					return
				case <-tick.C:
				}
				body, _ := json.Marshal(chaosJobs[i%len(chaosJobs)])
				sent := time.Now()
				resp, err := client.Post(c.submitter+"/submit_job", "application/json", bytes.NewReader(body))
				if err != nil {
					l.refuse(sent)
					continue
				}
				var out struct {
					JobID string `json:"job_id"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					l.refuse(sent)
					continue
				}
				id, err := strconv.ParseInt(out.JobID, 10, 64)
				if err != nil {
					panic(fmt.Sprintf("job_id %q: %v", out.JobID, err))
				}
				l.mu.Lock()
				l.ids = append(l.ids, id)
				l.sent = append(l.sent, sent)
				l.times = append(l.times, time.Now())
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *chaosLoad) refuse(sent time.Time) {
	l.mu.Lock()
	l.refused = append(l.refused, sent)
	l.mu.Unlock()
}

// during counts the submissions sent between from and to that were
// answered 201, and those that were not (an error status or no answer
// within the client's timeout).
func (l *chaosLoad) during(from, to time.Time) (accepted, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, at := range l.sent {
		if !at.Before(from) && at.Before(to) {
			accepted++
		}
	}
	for _, at := range l.refused {
		if !at.Before(from) && at.Before(to) {
			refused++
		}
	}
	return accepted, refused
}

// acceptedIDsBefore lists the jobs answered 201 before t.
func (l *chaosLoad) acceptedIDsBefore(t time.Time) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []int64
	for i, at := range l.times {
		if at.Before(t) {
			ids = append(ids, l.ids[i])
		}
	}
	return ids
}

// sentIDsBetween lists the jobs answered 201 whose request was sent
// between from and to.
func (l *chaosLoad) sentIDsBetween(from, to time.Time) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []int64
	for i, at := range l.sent {
		if !at.Before(from) && at.Before(to) {
			ids = append(ids, l.ids[i])
		}
	}
	return ids
}

// firstAcceptedAfter is when the first 201 after t came, or zero.
func (l *chaosLoad) firstAcceptedAfter(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, at := range l.times {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// stop ends the load once every submission in flight has its answer; it
// returns every job answered 201 and the number of refusals.
func (l *chaosLoad) stop() (ids []int64, refused int) {
	l.once.Do(func() { close(l.stopped) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.ids...), len(l.refused)
}

// The checker catches what it looks for: a deposed leader's completion of
// a job under a lease its successor had already reclaimed is both a stale
// result applied and a write of two coordinators in one epoch; a clean
// claim and completion is neither.
func TestChaosCheckerCatchesViolations(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	db, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.WithoutCancel(ctx))
	installWriteRecorder(t, ctx, db)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	as := func(app string) { exec("SELECT set_config('application_name', $1, false)", app) }
	lead := func(epoch int, id string) {
		exec("UPDATE coordinator_leader SET epoch = $1, leader_id = $2", epoch, id)
	}
	var bad, good int64
	if err := db.QueryRow(ctx, "INSERT INTO jobs (name) VALUES ('noop'), ('noop') RETURNING id").Scan(&bad); err != nil {
		t.Fatal(err)
	}
	good = bad + 1
	claim := "UPDATE jobs SET status = 'leased', attempts = attempts + 1, lease_token = $2, worker_id = 'w' WHERE id = $1"
	complete := "UPDATE jobs SET status = 'completed', lease_token = NULL, last_lease_token = $2, finished_at = now() WHERE id = $1"

	lead(1, "coord-1")
	as("coord-1")
	exec(claim, bad, 111)
	lead(2, "coord-2")
	as("coord-2")
	exec("UPDATE jobs SET lease_token = NULL, status = 'pending', errors = jsonb_build_array(jsonb_build_object('token', 111)) WHERE id = $1", bad)
	exec(claim, bad, 222)
	exec(claim, good, 333)
	exec(complete, good, 333)
	as("coord-1") // deposed, its result for lease 111 applied regardless
	exec(complete, bad, 111)

	n, example, err := staleCompletions(ctx, db, []int64{bad, good})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || example != bad {
		t.Errorf("staleCompletions = %d (e.g. %d), want 1 (job %d)", n, example, bad)
	}
	_, problems, err := epochWriters(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "epoch 2: jobs were written by coord-1,coord-2") {
		t.Errorf("epochWriters problems = %q, want one for epoch 2", problems)
	}
}
