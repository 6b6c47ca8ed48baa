package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/netns"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
)

// TestRedisSentinelFailover: every process finds Redis through Sentinel.
// While jobs are submitted without a pause, the Redis master is killed
// (SIGKILL); the sentinels promote the replica, every process follows it,
// and every job the submitter accepted (201), before, during or after the
// failover, completes. It logs the failover's time and the time from the
// kill to the first completion of a job submitted after it: how long
// dispatch stood still.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	testSentinelFailover(t, redistest.StartSentinels(t))
}

// TestRedisSentinelFailoverHosts is TestRedisSentinelFailover with the
// master, the replica and each of the three sentinels on a host of its
// own, as in production: replication, the sentinels' gossip and their
// vote go over links between hosts, and the clients (the dts processes,
// on the test's side of the bridge) reach every one at its host's
// address. It skips the test without root, ip or iptables.
func TestRedisSentinelFailoverHosts(t *testing.T) {
	t.Parallel()
	n := netns.New(t) // its cleanup runs last: after every process is gone
	var hosts []*netns.Host
	for _, name := range []string{"redis-master", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3"} {
		hosts = append(hosts, n.AddHost(name))
	}
	testSentinelFailover(t, redistest.StartSentinelsIn(t, hosts...))
}

// testSentinelFailover runs the dts processes against g and kills g's
// master under continuous submissions.
func testSentinelFailover(t *testing.T, g *redistest.Sentinels) {
	c := &cluster{t: t, logDir: t.TempDir(), dbURL: pgtest.NewDatabase(t), redis: g.Master}
	c.base = append([]string{"DATABASE_URL=" + c.dbURL, "PATH=" + os.Getenv("PATH")}, fastEnv...)
	c.base = append(c.base,
		// Through Sentinel only the URL's password and database count: a
		// host that resolves nowhere shows it is not dialled.
		"REDIS_URL=redis://:"+redistest.Password+"@via-sentinel.invalid:6379/0",
		"REDIS_SENTINEL_ADDRS="+strings.Join(g.Addrs(), ","),
		"REDIS_SENTINEL_MASTER="+redistest.MasterName,
		"REDIS_SENTINEL_PASSWORD="+redistest.SentinelPassword,
		// A delivery or a result that was on the old master but not yet
		// on the replica is lost with it; its job runs again once its
		// lease runs out.
		"LEASE_DURATION=3s",
	)
	t.Cleanup(c.stopAll)
	c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1", "WORKER_CONCURRENCY=4")
	c.startWorker("w2", "WORKER_CONCURRENCY=4")
	c.waitStatus(c.submit(map[string]any{"name": "noop"}), "completed", 10*time.Second)

	type accepted struct {
		id string
		at time.Time // when the 201 came
	}
	var (
		mu       sync.Mutex
		jobs     []accepted
		refused  = map[int]int{} // status → count, for the log
		stop     = make(chan struct{})
		done     = make(chan struct{})
		client   = &http.Client{Timeout: 5 * time.Second}
		body, _  = json.Marshal(map[string]any{"name": "noop", "max_retries": 5})
		submitAt = c.submitter + "/submit_job"
	)
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			resp, err := client.Post(submitAt, "application/json", bytes.NewReader(body))
			if err != nil {
				mu.Lock()
				refused[0]++
				mu.Unlock()
				continue
			}
			var out struct {
				JobID string `json:"job_id"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			mu.Lock()
			if resp.StatusCode == http.StatusCreated && out.JobID != "" {
				jobs = append(jobs, accepted{out.JobID, time.Now()})
			} else {
				refused[resp.StatusCode]++
			}
			mu.Unlock()
		}
	}()
	stopSubmitting := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}
	t.Cleanup(stopSubmitting)

	// Traffic flows through the first master before it dies.
	c.eventually(10*time.Second, "jobs submitted during the run to complete", func() bool {
		mu.Lock()
		n := len(jobs)
		var id string
		if n >= 50 {
			id = jobs[n-50].id
		}
		mu.Unlock()
		return id != "" && c.job(id)["status"] == "completed"
	})
	killed := time.Now()
	g.Master.Stop()
	g.WaitMaster(t, g.Replica.Addr(), 15*time.Second)
	failover := time.Since(killed)
	// Submissions go on after the failover, then stop.
	c.eventually(15*time.Second, "jobs submitted after the failover", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(jobs) > 0 && jobs[len(jobs)-1].at.After(killed.Add(failover+2*time.Second))
	})
	stopSubmitting()

	mu.Lock()
	all := jobs
	mu.Unlock()
	var first time.Time // earliest completion of a job submitted after the kill
	var after, rerun int
	for _, j := range all {
		got := c.waitStatus(j.id, "completed", 20*time.Second)
		if attempts, _ := got["attempts"].(float64); attempts > 1 {
			rerun++
		}
		if j.at.Before(killed) {
			continue
		}
		after++
		fin, err := time.Parse(time.RFC3339Nano, got["finished_at"].(string))
		if err != nil {
			t.Fatalf("job %s finished_at %v: %v", j.id, got["finished_at"], err)
		}
		if first.IsZero() || fin.Before(first) {
			first = fin
		}
	}
	if after == 0 {
		t.Fatal("no job was accepted after the kill")
	}
	span := all[len(all)-1].at.Sub(all[0].at)
	t.Logf("%d jobs accepted (201) in %v (%.0f/s), all completed, %d of them after the kill; %d ran more than once; other answers (0: no answer): %v",
		len(all), span.Round(time.Millisecond), float64(len(all))/span.Seconds(), after, rerun, refused)
	t.Logf("sentinels promoted the replica %v after the master's SIGKILL; the first job submitted after the kill completed %v after it",
		failover.Round(time.Millisecond), first.Sub(killed).Round(time.Millisecond))
}
