package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/testwait"
)

// PostgreSQL fails over under load: a primary with a synchronous standby,
// DATABASE_URL naming both with target_session_attrs=read-write, and the
// standby promoted (pg_promote, what Patroni or a managed service does) one
// second after the primary dies or hangs. Every process must reach the new
// primary within pgFailoverBound of the promotion, every job answered 201
// must be on it and complete, and no job may complete under a lease that
// also ended otherwise (a stale result applied).

// pgFailoverBound is the recovery bound docs/operations.md documents:
// connect_timeout (5 s, the default) for the hang to be judged, plus
// retries and a dispatch round, with room for a loaded CI machine.
const pgFailoverBound = 15 * time.Second

// TestPGFailoverPrimaryKilled: the primary is SIGKILLed with its backends;
// its clients' connections are reset at once.
func TestPGFailoverPrimaryKilled(t *testing.T) {
	t.Parallel()
	runPGFailover(t, pgtest.PairOptions{Sync: true}, func(p *pgtest.Pair) { p.Primary.Kill() })
}

// TestPGFailoverAsyncKilled is TestPGFailoverPrimaryKilled with an
// asynchronous standby, which may lose the jobs accepted in the last
// moment before the kill: it reports how many, and fails if any was
// accepted more than a second before (the lag docs/operations.md
// promises).
func TestPGFailoverAsyncKilled(t *testing.T) {
	t.Parallel()
	runPGFailover(t, pgtest.PairOptions{}, func(p *pgtest.Pair) { p.Primary.Kill() })
}

// TestPGFailoverPrimaryHung: the primary and its backends are SIGSTOPped
// and stay so: their connections stay open, their kernel acknowledges
// what is sent, and nothing answers. Only dts's own timeouts (the hang
// guard, connect_timeout) free the services' connections, while both
// coordinators hold connections to it.
func TestPGFailoverPrimaryHung(t *testing.T) {
	t.Parallel()
	runPGFailover(t, pgtest.PairOptions{Sync: true}, func(p *pgtest.Pair) { p.Primary.Pause() })
}

// TestPGFailoverPrimaryPartitioned: the primary, in a network namespace of
// its own, is cut off by a partition that drops everything it sends
// (pgtest's Partition). As with a hang, nothing resets the services'
// connections. Skipped without root or iproute2.
func TestPGFailoverPrimaryPartitioned(t *testing.T) {
	t.Parallel()
	runPGFailover(t, pgtest.PairOptions{Sync: true, PartitionablePrimary: true}, func(p *pgtest.Pair) {
		if err := p.Primary.Partition(); err != nil {
			t.Fatal(err)
		}
	})
}

func runPGFailover(t *testing.T, opt pgtest.PairOptions, fault func(*pgtest.Pair)) {
	sync := opt.Sync
	p := pgtest.StartPair(t, opt)
	c := &cluster{t: t, logDir: t.TempDir(), dbURL: p.URL(), redis: redistest.Start(t)}
	c.base = append([]string{"DATABASE_URL=" + c.dbURL, "REDIS_URL=" + c.redis.URL(), "PATH=" + os.Getenv("PATH")}, fastEnv...)
	t.Cleanup(c.stopAll) // before the pair's cleanup: the processes stop first

	c1 := c.startCoordinator("c1")
	c.eventually(20*time.Second, "c1 to lead", func() bool { return c.health(c1)["role"] == "leader" })
	c2 := c.startCoordinator("c2")
	c.startSubmitter()
	c.startWorker("w1")
	c.startWorker("w2")
	epochBefore := c.health(c1)["epoch"].(float64)

	load := startLoad(c, 4)
	ctx := ctxT(t, 90*time.Second)
	var lag time.Duration // the largest replay lag seen under load
	c.eventually(20*time.Second, "50 jobs accepted before the fault", func() bool {
		var l *time.Duration
		if err := p.Primary.Query(ctx, "postgres", "SELECT max(replay_lag) FROM pg_stat_replication", &l); err == nil && l != nil {
			lag = max(lag, *l)
		}
		return load.acceptedCount() >= 50
	})
	fault(p)
	faulted := time.Now()
	t.Logf("replication (synchronous: %v) replay lag under load: up to %v", sync, lag)
	// As an HA manager does, promote once a probe of the primary fails (a
	// second to answer).
	testwait.For(t, 10*time.Second, "a probe of the primary to fail", func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var one int
		return p.Primary.Query(pctx, "postgres", "SELECT 1", &one) != nil
	})
	if err := p.Standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	t.Logf("promoted %v after the fault", promoted.Sub(faulted).Round(time.Millisecond))

	c.eventually(pgFailoverBound, "a submission accepted after the promotion", func() bool {
		return !load.firstAcceptedAfter(promoted).IsZero()
	})
	submitterUp := load.firstAcceptedAfter(promoted)
	c.eventually(pgFailoverBound+5*time.Second, "1 s of accepted load after the submitter's recovery", func() bool {
		return time.Since(submitterUp) > time.Second
	})
	ids, refused := load.stop()

	db, err := pgx.Connect(ctx, p.Standby.URL(pgtest.PairDatabase))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.WithoutCancel(ctx))
	var leaderUp time.Time
	c.eventually(pgFailoverBound, "a job finished after the promotion", func() bool {
		var at *time.Time
		err := db.QueryRow(ctx, "SELECT min(finished_at) FROM jobs WHERE finished_at > $1", promoted).Scan(&at)
		if err == nil && at != nil {
			leaderUp = *at
		}
		return at != nil
	})
	t.Logf("recovery after the promotion: submitter's first 201 %v, leader's first completion %v; "+
		"%d jobs accepted, %d submissions refused (5xx or timeout) around the fault",
		submitterUp.Sub(promoted).Round(time.Millisecond), leaderUp.Sub(promoted).Round(time.Millisecond), len(ids), refused)
	for what, at := range map[string]time.Time{"the submitter's first 201": submitterUp, "the leader's first completion": leaderUp} {
		if d := at.Sub(promoted); d > pgFailoverBound {
			t.Errorf("%s came %v after the promotion; the bound is %v", what, d, pgFailoverBound)
		}
	}

	// Every accepted job is on the promoted standby and completes, each
	// under exactly one lease: the lease that completed it ended in no
	// other way (no reclaim, failure or hand-back with its token).
	if !sync {
		ids = lost(t, db, ids, load.acceptedBefore(faulted.Add(-time.Second)))
	}
	c.eventually(40*time.Second, fmt.Sprintf("all %d accepted jobs to complete", len(ids)), func() bool {
		var n, done int
		err := db.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE status = 'completed') FROM jobs WHERE id = ANY($1)", ids).Scan(&n, &done)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(ids) {
			t.Fatalf("%d of the %d jobs answered 201 are on the promoted standby", n, len(ids))
		}
		return done == n
	})
	var twice, stale int
	if err := db.QueryRow(ctx, `
		SELECT count(*) FROM jobs j
		WHERE j.id = ANY($1) AND (
		      EXISTS (SELECT 1 FROM jsonb_array_elements(j.errors) e WHERE (e->>'token')::bigint = j.last_lease_token)
		   OR EXISTS (SELECT 1 FROM job_events v WHERE v.job_id = j.id AND v.kind = 'released' AND (v.detail->>'token')::bigint = j.last_lease_token))`,
		ids).Scan(&twice); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(ctx, "SELECT count(*) FROM job_events WHERE kind = 'stale_result'").Scan(&stale); err != nil {
		t.Fatal(err)
	}
	if twice != 0 {
		t.Errorf("%d jobs completed under a lease that also ended otherwise", twice)
	}
	t.Logf("stale results rejected: %d", stale)

	// One leader, recorded as such, under an epoch at least the one before.
	// PostgreSQL's record is read before the coordinators' word, and both
	// again while a coordinator names a newer epoch than the record: on a
	// loaded machine the lease can change hands between the two reads.
	var epoch int64
	var leader string
	testwait.NoError(t, 10*time.Second, "exactly one coordinator to lead, the one PostgreSQL records", func() error {
		if err := db.QueryRow(ctx, "SELECT epoch, leader_id FROM coordinator_leader").Scan(&epoch, &leader); err != nil {
			t.Fatal(err)
		}
		h1, h2 := c.health(c1), c.health(c2)
		if (h1["role"] == "leader") == (h2["role"] == "leader") {
			return fmt.Errorf("c1 is %v, c2 is %v", h1["role"], h2["role"])
		}
		for _, p := range []struct {
			co *proc
			h  map[string]any
		}{{c1, h1}, {c2, h2}} {
			he := int64(p.h["epoch"].(float64))
			if p.h["role"] == "leader" && (p.co.name != leader || he != epoch) {
				err := fmt.Errorf("%s leads in epoch %d; PostgreSQL records %s in epoch %d", p.co.name, he, leader, epoch)
				if he > epoch { // took over after PostgreSQL was read
					return err
				}
				return testwait.GiveUp(err)
			}
		}
		return nil
	})
	if float64(epoch) < epochBefore {
		t.Errorf("epoch went back from %v to %d", epochBefore, epoch)
	}
	t.Logf("leader %s, epoch %v before, %d after", leader, epochBefore, epoch)
}

// lost reports the accepted jobs the promoted standby lacks, fails if one
// of the first `early` accepted ones is among them, and returns those it
// has.
func lost(t *testing.T, db *pgx.Conn, ids []int64, early int) []int64 {
	t.Helper()
	var kept []int64
	if err := db.QueryRow(t.Context(), "SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM jobs WHERE id = ANY($1)", ids).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	have := map[int64]bool{}
	for _, id := range kept {
		have[id] = true
	}
	var missing []int64
	for i, id := range ids {
		if !have[id] {
			missing = append(missing, id)
			if i < early {
				t.Errorf("job %d, accepted more than a second before the kill, is lost", id)
			}
		}
	}
	t.Logf("asynchronous standby: %d of %d accepted jobs lost: %v", len(missing), len(ids), missing)
	return kept
}

// load submits short jobs from n goroutines until stopped, recording the
// ids answered 201 and when each was.
type load struct {
	c       *cluster
	stopped chan struct{}
	wg      sync.WaitGroup

	mu       sync.Mutex
	ids      []int64
	times    []time.Time
	refusals int
}

func startLoad(c *cluster, n int) *load {
	l := &load{c: c, stopped: make(chan struct{})}
	client := &http.Client{Timeout: 30 * time.Second}
	body, _ := json.Marshal(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 0.05}, "max_retries": 5})
	for range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stopped:
					return
				default:
				}
				resp, err := client.Post(c.submitter+"/submit_job", "application/json", bytes.NewReader(body))
				if err != nil {
					l.refused()
					l.backOff()
					continue
				}
				var out struct {
					JobID string `json:"job_id"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					l.refused()
					l.backOff()
					continue
				}
				id, err := strconv.ParseInt(out.JobID, 10, 64)
				if err != nil {
					panic(fmt.Sprintf("job_id %q: %v", out.JobID, err))
				}
				l.mu.Lock()
				l.ids = append(l.ids, id)
				l.times = append(l.times, time.Now())
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) refused() {
	l.mu.Lock()
	l.refusals++
	l.mu.Unlock()
}

// backOff spaces a client's tries after a refusal (50 ms), or ends at once
// when the load stops.
func (l *load) backOff() {
	select {
	case <-l.stopped:
	case <-time.After(50 * time.Millisecond):
	}
}

func (l *load) acceptedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ids)
}

// acceptedBefore is how many 201s came before t.
func (l *load) acceptedBefore(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.times {
		if at.Before(t) {
			n++
		}
	}
	return n
}

// firstAcceptedAfter is when the first 201 after t came, or zero.
func (l *load) firstAcceptedAfter(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, at := range l.times {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// stop ends the load once every submission in flight has its answer.
func (l *load) stop() (ids []int64, refusals int) {
	close(l.stopped)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ids, l.refusals
}
