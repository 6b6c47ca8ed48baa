package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// The stall faults a production cluster meets: a leader that stops
// (SIGSTOP, a GC or VM pause), a table lock that blocks the leader's
// statements, a leader frozen with a standby waiting, and a poison result.
// Each runs with the fast settings (heartbeats every 200 ms, a worker dead
// after 600 ms of silence) and a 4 s lease, so that every stall is longer
// than both.

// stallEnv is fastEnv with a lease shorter than the stalls.
var stallEnv = []string{"LEASE_DURATION=4s"}

// submitSleeps submits n sleep jobs of secs seconds without retries: a
// single failed attempt is a failed job.
func submitSleeps(c *cluster, n int, secs float64) []string {
	c.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": secs}, "max_retries": 0})
	}
	return ids
}

// waitAll waits until every job is completed, and fails at once if one
// ends in another final state.
func waitAll(c *cluster, ids []string, timeout time.Duration) {
	c.t.Helper()
	for _, id := range ids {
		c.eventually(timeout, "job "+id+" to complete", func() bool {
			j := c.job(id)
			switch j["status"] {
			case "failed", "canceled":
				c.t.Fatalf("job %s ended %v: %v", id, j["status"], j["errors"])
			}
			return j["status"] == "completed"
		})
	}
}

// waitRunning waits until every job is leased.
// waitRunning waits until every job is leased and its workers hold them
// all: a lease alone does not mean its delivery has reached the worker
// (under load it may still sit on the worker's Redis list, where a Redis
// restart loses it, and then its lease runs out).
func waitRunning(c *cluster, ids []string, workers ...*proc) {
	c.t.Helper()
	for _, id := range ids {
		c.waitStatus(id, "leased", 20*time.Second)
	}
	c.eventually(20*time.Second, "the workers to hold every job", func() bool {
		held := 0.0
		for _, w := range workers {
			n, _ := c.health(w)["in_flight"].(float64)
			held += n
		}
		return held >= float64(len(ids))
	})
}

// leasesExpiredAt is the query for whether every one of the jobs ($1)
// has had a lease deadline in the past for $2 seconds by PostgreSQL's
// clock, the one leases are judged by.
const leasesExpiredAt = `SELECT bool_and(lease_expires_at < clock_timestamp() - $2 * interval '1 second')
	FROM jobs WHERE id = ANY($1::bigint[])`

// waitLeasesExpire waits until every lease of ids has been out for by, by
// PostgreSQL's clock: a stall that lasts until then is longer than the
// lease and than the workers' heartbeat deadline.
func waitLeasesExpire(c *cluster, ids []string, by time.Duration) {
	c.t.Helper()
	ctx := ctxT(c.t, time.Minute)
	conn, err := pgx.Connect(ctx, c.dbURL)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	c.eventually(30*time.Second, fmt.Sprintf("every lease to be out for %v", by), func() bool {
		var expired bool
		if err := conn.QueryRow(ctx, leasesExpiredAt, jobIDs(c.t, ids), by.Seconds()).Scan(&expired); err != nil {
			c.t.Fatal(err)
		}
		return expired
	})
}

// jobIDs parses the API's job ids.
func jobIDs(t *testing.T, ids []string) []int64 {
	t.Helper()
	out := make([]int64, len(ids))
	for i, id := range ids {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			t.Fatalf("job id %q: %v", id, err)
		}
		out[i] = n
	}
	return out
}

// TestLeaderPausedJobsComplete: the leader is stopped (SIGSTOP) until its
// leases have been out for 1 s (about 5 s) while six 8 s jobs without retries run on live workers. Every job
// completes: the leader times heartbeats by their arrival in Redis and
// judges nobody until it has caught up.
func TestLeaderPausedJobsComplete(t *testing.T) {
	t.Parallel()
	c := newCluster(t, stallEnv...)
	leader := c.startCoordinator("c1")
	c.startSubmitter()
	w1, w2 := c.startWorker("w1"), c.startWorker("w2")
	ids := submitSleeps(c, 6, 8)
	waitRunning(c, ids, w1, w2)
	leader.signal(t, syscall.SIGSTOP)
	waitLeasesExpire(c, ids, time.Second)
	leader.signal(t, syscall.SIGCONT)
	waitAll(c, ids, 30*time.Second)
}

// TestJobsTableLockedJobsComplete: the jobs table is locked (ACCESS
// EXCLUSIVE) until the leases have been out for 2 s (about 6 s) while six 8 s jobs without retries run: every
// statement of the leader waits, heartbeats' lease extensions among them.
// Every job completes.
func TestJobsTableLockedJobsComplete(t *testing.T) {
	t.Parallel()
	c := newCluster(t, stallEnv...)
	c.startCoordinator("c1")
	c.startSubmitter()
	w1, w2 := c.startWorker("w1"), c.startWorker("w2")
	ids := submitSleeps(c, 6, 8)
	waitRunning(c, ids, w1, w2)
	ctx := ctxT(t, time.Minute)
	conn, err := pgx.Connect(ctx, c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	// Under the lock, only this transaction reads the leases.
	c.eventually(30*time.Second, "every lease to be out for 2s under the lock", func() bool {
		var expired bool
		if err := tx.QueryRow(ctx, leasesExpiredAt, jobIDs(t, ids), 2.0).Scan(&expired); err != nil {
			t.Fatal(err)
		}
		return expired
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitAll(c, ids, 30*time.Second)
}

// TestFrozenLeaderIsReplaced: the leader is frozen for 30 s with a standby
// running. Jobs submitted during the freeze complete within 10 s (the
// standby took the lease); after the thaw there is one leader, and the old
// one's writes change nothing.
func TestFrozenLeaderIsReplaced(t *testing.T) {
	t.Parallel()
	c := newCluster(t, stallEnv...)
	c1 := c.startCoordinator("c1")
	c.eventually(10*time.Second, "c1 to lead", func() bool { return c.health(c1)["role"] == "leader" })
	c2 := c.startCoordinator("c2")
	c.startSubmitter()
	c.startWorker("w1")
	c.startWorker("w2")
	before := c.submit(map[string]any{"name": "noop"})
	c.waitStatus(before, "completed", 10*time.Second)

	c1.signal(t, syscall.SIGSTOP)
	frozen := time.Now()
	var ids []string
	for range 10 {
		ids = append(ids, c.submit(map[string]any{"name": "noop"}))
	}
	waitAll(c, ids, 10*time.Second)
	t.Logf("10 jobs submitted during the freeze completed %v after it began", time.Since(frozen).Round(time.Millisecond))
	if h := c.health(c2); h["role"] != "leader" {
		t.Fatalf("standby is %v, want leader", h)
	}
	// The freeze itself is the fault, 30 s of it: no state marks its end,
	// and the thawed leader must find its lease long gone however long
	// its timers and connections sat still, so it is a sleep.
	time.Sleep(30*time.Second - time.Since(frozen))
	c1.signal(t, syscall.SIGCONT)

	c.eventually(10*time.Second, "the thawed leader to stand by", func() bool { return c.health(c1)["role"] == "standby" })
	if h := c.health(c2); h["role"] != "leader" {
		t.Fatalf("after the thaw c2 is %v, want leader", h)
	}
	more := submitSleeps(c, 4, 0.5)
	waitAll(c, more, 20*time.Second)
	for _, p := range []*proc{c1, c2} {
		if n := c.metric(p.url, "dts_coordinator_leader", ""); (p == c2) != (n == 1) {
			t.Errorf("%s dts_coordinator_leader = %v", p.name, n)
		}
	}
}

// TestPoisonResultAmongGoodOnes: a worker reports a result PostgreSQL
// cannot store (a number beyond numeric's range, as a handler returning a
// json.RawMessage can). The job's attempt fails with reason
// invalid_result, and the good results around it are applied at once.
func TestPoisonResultAmongGoodOnes(t *testing.T) {
	t.Parallel()
	c := newCluster(t, stallEnv...)
	c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1")
	poisoned := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 30}, "max_retries": 0})
	c.waitStatus(poisoned, "leased", 20*time.Second)

	// The worker's report, with a result it should not have produced.
	ctx := ctxT(t, time.Minute)
	var token int64
	var worker string
	conn, err := pgx.Connect(ctx, c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	id, _ := strconv.ParseInt(poisoned, 10, 64)
	if err := conn.QueryRow(ctx, `SELECT lease_token, worker_id FROM jobs WHERE id = $1`, id).Scan(&token, &worker); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.redis.Addr()})
	defer rdb.Close()
	result := fmt.Sprintf(`{"job_id":%d,"lease_token":%d,"worker_id":%q,"attempt":1,"outcome":"completed","result":{"x":1e-20000},`+
		`"started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01Z"}`, id, token, worker)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "dts:results", Values: []any{"r", result}}).Err(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	var good []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			id := c.submit(map[string]any{"name": "noop"})
			mu.Lock()
			good = append(good, id)
			mu.Unlock()
		})
	}
	wg.Wait()
	waitAll(c, good, 10*time.Second)
	t.Logf("10 good jobs submitted after the poison result completed in %v", time.Since(start).Round(time.Millisecond))
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the good jobs took %v to complete; want about a second", took)
	}
	j := c.waitStatus(poisoned, "failed", 10*time.Second)
	b, _ := json.Marshal(j["errors"])
	var errs []struct{ Reason, Error string }
	_ = json.Unmarshal(b, &errs)
	if len(errs) != 1 || errs[0].Reason != "invalid_result" || errs[0].Error == "" {
		t.Errorf("poisoned job's errors = %s; want one invalid_result with a message", b)
	}
}

// TestTakeOverWithRedisDown: the standby takes over while Redis is
// unreachable. It cannot hear heartbeats, so it reclaims nothing; when
// Redis is back, the running job's heartbeats extend its lease and it
// completes (no retries: a reclaim would have failed it).
func TestTakeOverWithRedisDown(t *testing.T) {
	t.Parallel()
	c := newCluster(t, stallEnv...)
	c1 := c.startCoordinator("c1")
	c.eventually(10*time.Second, "c1 to lead", func() bool { return c.health(c1)["role"] == "leader" })
	c2 := c.startCoordinator("c2")
	c.startSubmitter()
	w1 := c.startWorker("w1")
	ids := submitSleeps(c, 2, 8)
	waitRunning(c, ids, w1)

	c.redis.Stop()
	c1.kill(t)
	c.eventually(10*time.Second, "c2 to take over", func() bool { return c.health(c2)["role"] == "leader" })
	waitLeasesExpire(c, ids, time.Second)
	c.redis.Restart(t)
	waitAll(c, ids, 30*time.Second)
}
