package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestSubmitToCompleted(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1")

	ids := map[string]string{}
	for _, name := range []string{"noop", "cpu_intensive", "io_intensive", "mixed_workload", "default"} {
		ids[name] = c.submit(map[string]any{"name": name, "payload": "x"})
	}
	obj := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 0.05}})
	for name, id := range ids {
		j := c.waitStatus(id, "completed", 30*time.Second)
		if j["attempts"].(float64) != 1 || j["worker_id"] != "w1" || j["finished_at"] == nil {
			t.Errorf("%s: completed job = %v, want 1 attempt on w1 with finished_at", name, j)
		}
	}
	j := c.waitStatus(obj, "completed", 30*time.Second)
	if p, ok := j["payload"].(map[string]any); !ok || p["seconds"] != 0.05 {
		t.Errorf("payload came back as %v, want the JSON object submitted", j["payload"])
	}
	cpu := c.job(ids["cpu_intensive"])
	if r, ok := cpu["result"].(map[string]any); !ok || r["hashes"] == nil {
		t.Errorf("cpu_intensive result = %v, want a hash count", cpu["result"])
	}
}

func TestFailingJobRetriesIntoDLQAndRequeue(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1")

	id := c.submit(map[string]any{"name": "test_job", "payload": "invalid_job_content_1", "max_retries": 2})
	j := c.waitStatus(id, "failed", 30*time.Second)
	if j["attempts"].(float64) != 3 {
		t.Fatalf("attempts = %v, want 3 (max_retries 2)", j["attempts"])
	}
	if errs := j["errors"].([]any); len(errs) != 3 {
		t.Fatalf("errors = %v, want one per attempt", errs)
	}

	// The DLQ lists it, in the API and in Redis.
	code, dlq := c.do("GET", c.submitter+"/dlq", nil)
	if code != 200 {
		t.Fatalf("GET /dlq = %d %v", code, dlq)
	}
	found := false
	for _, e := range dlq["jobs"].([]any) {
		e := e.(map[string]any)
		if e["job_id"] == id {
			found = true
			if e["reason"] != "max_retries_exceeded" || len(e["errors"].([]any)) != 3 {
				t.Errorf("dlq entry = %v, want reason max_retries_exceeded and 3 errors", e)
			}
		}
	}
	if !found {
		t.Fatalf("job %s not in /dlq: %v", id, dlq)
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.redis.Addr()})
	defer rdb.Close()
	c.eventually(10*time.Second, "dead_letter_queue entry in Redis", func() bool {
		n, _ := rdb.LLen(ctxT(t, time.Second), "dead_letter_queue").Result()
		return n == 1
	})
	entry, _ := rdb.LIndex(ctxT(t, time.Second), "dead_letter_queue", 0).Result()
	if want := fmt.Sprintf(`"job_id":%s`, id); !strings.Contains(entry, want) || !strings.Contains(entry, "invalid job content") {
		t.Errorf("Redis DLQ entry = %s, want the job and its error", entry)
	}

	// Requeue: the job runs again with attempts reset, fails again.
	code, out := c.do("POST", c.submitter+"/dlq/"+id+"/requeue", nil)
	if code != 200 {
		t.Fatalf("requeue = %d %v", code, out)
	}
	c.eventually(30*time.Second, "requeued job to fail again", func() bool {
		j = c.job(id)
		return j["status"] == "failed" && len(j["errors"].([]any)) == 6
	})
	if j["attempts"].(float64) != 3 {
		t.Fatalf("after requeue attempts = %v, want 3 again", j["attempts"])
	}
	code, _ = c.do("POST", c.submitter+"/dlq/999999/requeue", nil)
	if code != http.StatusNotFound {
		t.Errorf("requeue unknown = %d, want 404", code)
	}
}

func TestCancelPendingAndRunning(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	coord := c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1")

	pending := c.submit(map[string]any{"name": "noop", "delay_seconds": 3600})
	code, out := c.do("POST", c.submitter+"/jobs/"+pending+"/cancel", nil)
	if code != 200 || out["status"] != "canceled" {
		t.Fatalf("cancel pending = %d %v", code, out)
	}
	running := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 60}})
	c.waitStatus(running, "leased", 10*time.Second)
	start := time.Now()
	code, out = c.do("POST", c.submitter+"/jobs/"+running+"/cancel", nil)
	if code != http.StatusAccepted {
		t.Fatalf("cancel running = %d %v, want 202", code, out)
	}
	j := c.waitStatus(running, "canceled", 10*time.Second)
	if time.Since(start) > 5*time.Second || j["attempts"].(float64) != 1 {
		t.Fatalf("canceled after %v with attempts %v; want quickly and 1 attempt", time.Since(start), j["attempts"])
	}
	// It is never retried: not when the coordinator applies the result its
	// worker sent for the canceled run (the only result of this cluster).
	c.eventually(10*time.Second, "the canceled run's result applied", func() bool {
		return c.metric(coord.url, "dts_result_batch_size_sum", "") >= 1
	})
	if j := c.job(running); j["status"] != "canceled" {
		t.Fatalf("canceled job became %v", j["status"])
	}
	code, _ = c.do("POST", c.submitter+"/jobs/"+running+"/cancel", nil)
	if code != http.StatusConflict {
		t.Errorf("cancel of a canceled job = %d, want 409", code)
	}
}

func TestWorkerKilledMidJobRunsElsewhere(t *testing.T) {
	t.Parallel()
	c := newCluster(t) // lease 30s: recovery must come from heartbeats
	c.startCoordinator("c1")
	c.startSubmitter()
	a := c.startWorker("wa", "WORKER_CONCURRENCY=4")
	// Jobs long enough to still run on wa when it is killed, however long
	// wb takes to start on a loaded machine.
	var ids []string
	for i := 0; i < 4; i++ {
		ids = append(ids, c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 5}}))
	}
	for _, id := range ids {
		c.waitStatus(id, "leased", 10*time.Second)
	}
	c.startWorker("wb", "WORKER_CONCURRENCY=4")
	killed := time.Now()
	a.kill(t)
	for _, id := range ids {
		j := c.waitStatus(id, "completed", 20*time.Second)
		if j["worker_id"] != "wb" || j["attempts"].(float64) != 2 {
			t.Errorf("job %s = worker %v attempts %v, want wb and 2", id, j["worker_id"], j["attempts"])
		}
	}
	if took := time.Since(killed); took > 15*time.Second {
		t.Errorf("recovery took %v; the lease is 30s, heartbeats should make it a few seconds plus the 5 s jobs", took)
	}
}

func TestStaleResultAfterLostLeaseIsRejected(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	coord := c.startCoordinator("c1")
	c.startSubmitter()
	a := c.startWorker("wa")
	id := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 1.5}})
	c.waitStatus(id, "leased", 10*time.Second)
	a.signal(t, syscall.SIGSTOP) // paused: heartbeats stop, the job is reclaimed
	c.startWorker("wb")
	j := c.waitStatus(id, "completed", 20*time.Second)
	if j["worker_id"] != "wb" {
		t.Fatalf("completed by %v, want wb", j["worker_id"])
	}
	a.signal(t, syscall.SIGCONT) // wa finishes its old attempt and reports it
	c.eventually(15*time.Second, "stale result rejected", func() bool {
		return c.metric(coord.url, "dts_stale_results_total", "") >= 1
	})
	j = c.job(id)
	if j["status"] != "completed" || j["worker_id"] != "wb" || j["attempts"].(float64) != 2 {
		t.Fatalf("after the stale result: %v", j)
	}
	// The timeline: wa's lease reclaimed, wb's completed, and wa's late
	// result rejected as a stale result of its (ended) lease.
	var stale map[string]any
	c.eventually(10*time.Second, "the stale result on the job's timeline", func() bool {
		code, tl := c.do("GET", c.submitter+"/jobs/"+id+"/timeline", nil)
		if code != http.StatusOK {
			t.Fatalf("GET /jobs/%s/timeline = %d %v", id, code, tl)
		}
		for _, e := range tl["timeline"].([]any) {
			if e := e.(map[string]any); e["kind"] == "stale_result" {
				stale = e
			}
		}
		as := tl["attempts"].([]any)
		if len(as) != 2 {
			t.Fatalf("attempts = %v; want wa's reclaimed, then wb's completed", as)
		}
		a1, a2 := as[0].(map[string]any), as[1].(map[string]any)
		if a1["worker_id"] != "wa" || a1["outcome"] != "worker_failure" && a1["outcome"] != "lease_timeout" ||
			a2["worker_id"] != "wb" || a2["outcome"] != "completed" || a1["lease_token"] == a2["lease_token"] {
			t.Fatalf("attempts = %v; want wa's reclaimed, then wb's completed, under distinct tokens", as)
		}
		return stale != nil
	})
	if stale["worker_id"] != "wa" || stale["of_attempt"] != 1.0 || stale["lease_token"] == nil {
		t.Errorf("stale result entry = %v; want wa's, of attempt 1, with its token", stale)
	}
}

func TestGracefulShutdownHandsJobsBack(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	coord := c.startCoordinator("c1")
	c.startSubmitter()
	a := c.startWorker("wa", "SHUTDOWN_GRACE=1s")
	short := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 0.5}})
	long := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 5}})
	c.waitStatus(short, "leased", 10*time.Second)
	c.waitStatus(long, "leased", 10*time.Second)
	// Leased is not started: a delivery wa has not started when its drain
	// begins is handed back unrun. Its log (LOG_LEVEL=debug) says when
	// both handlers have started.
	c.eventually(10*time.Second, "wa to start both jobs", func() bool {
		b, err := os.ReadFile(a.log)
		return err == nil && strings.Count(string(b), `"msg":"attempt started"`) >= 2
	})
	// wb starts while wa drains, not before the SIGTERM: a race-built
	// worker can take longer to start on a loaded machine than the long
	// job takes to run.
	a.signal(t, syscall.SIGTERM)
	c.startWorker("wb")
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not exit after SIGTERM")
	}
	// The short job finished within the grace period: its result counts.
	j := c.waitStatus(short, "completed", 10*time.Second)
	if j["worker_id"] != "wa" || j["attempts"].(float64) != 1 {
		t.Fatalf("short job = worker %v attempts %v; want wa, 1 (finished during the grace period)", j["worker_id"], j["attempts"])
	}
	// The long one was handed back and ran elsewhere; that attempt does not count.
	j = c.waitStatus(long, "completed", 20*time.Second)
	if j["worker_id"] != "wb" || j["attempts"].(float64) != 1 {
		t.Fatalf("long job = worker %v attempts %v; want wb, and the handed-back attempt not counted", j["worker_id"], j["attempts"])
	}
	if n := c.metric(coord.url, "dts_stale_results_total", ""); n != 0 {
		t.Fatalf("dts_stale_results_total = %v, want 0: a clean stop must not discard results", n)
	}
}

func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c1 := c.startCoordinator("c1")
	c.eventually(10*time.Second, "c1 to lead", func() bool { return c.health(c1)["role"] == "leader" })
	c2 := c.startCoordinator("c2")
	c.startSubmitter()
	c.startWorker("w1")
	if h := c.health(c2); h["role"] != "standby" {
		t.Fatalf("second coordinator is %v, want standby", h)
	}
	epoch := c.health(c1)["epoch"].(float64)
	id := c.submit(map[string]any{"name": "noop"})
	c.waitStatus(id, "completed", 10*time.Second)

	killed := time.Now()
	c1.kill(t)
	c.eventually(10*time.Second, "c2 to take over", func() bool { return c.health(c2)["role"] == "leader" })
	if h := c.health(c2); h["epoch"].(float64) <= epoch {
		t.Fatalf("new leader epoch %v, want above %v", h["epoch"], epoch)
	}
	t.Logf("standby took over in %v", time.Since(killed))
	for i := 0; i < 20; i++ {
		id = c.submit(map[string]any{"name": "noop"})
	}
	c.waitStatus(id, "completed", 10*time.Second)
}

func TestRedisFlushMidRun(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "LEASE_DURATION=2s")
	coord := c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1", "WORKER_CONCURRENCY=8")
	c.startWorker("w2", "WORKER_CONCURRENCY=8")
	var ids []string
	for i := 0; i < 120; i++ {
		ids = append(ids, c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 0.05}, "max_retries": 10}))
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.redis.Addr()})
	defer rdb.Close()
	c.eventually(20*time.Second, "some jobs done", func() bool {
		return c.metric(coord.url, "jobs_total", `status="completed"`) >= 20
	})
	if err := rdb.FlushAll(ctxT(t, time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		ids = append(ids, c.submit(map[string]any{"name": "noop"}))
	}
	for _, id := range ids {
		c.waitStatus(id, "completed", 60*time.Second)
	}
}

func TestHeartbeatsKeepLongJobsLeased(t *testing.T) {
	t.Parallel()
	// A lease of 1 s and a job of 3 s: only heartbeat extension keeps it.
	c := newCluster(t, "LEASE_DURATION=1s")
	coord := c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1")
	id := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 3}})
	j := c.waitStatus(id, "completed", 20*time.Second)
	if j["attempts"].(float64) != 1 {
		t.Fatalf("attempts = %v, want 1: a healthy worker's job must not be taken away", j["attempts"])
	}
	if n := c.metric(coord.url, "dts_lease_timeouts_total", ""); n != 0 {
		t.Fatalf("dts_lease_timeouts_total = %v, want 0", n)
	}
}

func TestJobTimeoutFailsTheAttempt(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	coord := c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1")
	id := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 30}, "timeout_seconds": 1, "max_retries": 1})
	start := time.Now()
	j := c.waitStatus(id, "failed", 20*time.Second)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("two 1 s attempts took %v", took)
	}
	errs := j["errors"].([]any)
	if len(errs) != 2 || errs[0].(map[string]any)["reason"] != "timeout" {
		t.Fatalf("errors = %v, want two timeouts", errs)
	}
	if n := c.metric(coord.url, "jobs_total", `status="timeout"`); n < 2 {
		t.Fatalf(`jobs_total{status="timeout"} = %v, want 2`, n)
	}
}
