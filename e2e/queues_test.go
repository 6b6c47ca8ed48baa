package e2e

import (
	"net/http"
	"testing"
	"time"
)

// TestQueues drives queues through the real binaries: a worker started
// with WORKER_QUEUES serves only its queues; a queue paused over HTTP keeps
// its jobs waiting (the coordinator's metrics show the pause) while another
// queue's jobs run, and resumed, runs them; GET /queues counts them.
func TestQueues(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	coord := c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1", "WORKER_QUEUES=critical:3,reports:1", "WORKER_CONCURRENCY=2")

	elsewhere := c.submit(map[string]any{"name": "noop", "queue": "elsewhere"})
	first := c.submit(map[string]any{"name": "noop", "queue": "critical"})
	c.waitStatus(first, "completed", 30*time.Second)
	if j := c.job(elsewhere); j["status"] != "pending" {
		t.Fatalf("a job of a queue no worker serves: %v; want pending", j["status"])
	}

	code, out := c.do("POST", c.submitter+"/queues/reports/pause", nil)
	if code != http.StatusOK || out["paused"] != true {
		t.Fatalf("pause: %d %v", code, out)
	}
	c.eventually(10*time.Second, "the leader to load the pause", func() bool {
		return c.metric(coord.url, "dts_queues_configured", "") == 1
	})
	held := c.submit(map[string]any{"name": "noop", "queue": "reports", "priority": 9})
	next := c.submit(map[string]any{"name": "noop", "queue": "critical"})
	c.waitStatus(next, "completed", 30*time.Second)
	if j := c.job(held); j["status"] != "pending" {
		t.Fatalf("a job of the paused queue: %v; want pending", j["status"])
	}
	if v := c.metric(coord.url, "dts_queue_paused", `queue="reports"`); v != 1 {
		t.Errorf("dts_queue_paused{queue=\"reports\"} = %v; want 1", v)
	}
	code, out = c.do("GET", c.submitter+"/queues", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /queues: %d %v", code, out)
	}
	found := false
	for _, q := range out["queues"].([]any) {
		q := q.(map[string]any)
		if q["name"] == "reports" {
			found = true
			if q["paused"] != true || q["depth"] != 1.0 || q["running"] != 0.0 {
				t.Errorf("reports in GET /queues: %v", q)
			}
		}
	}
	if !found {
		t.Fatalf("GET /queues lacks reports: %v", out)
	}

	if code, out := c.do("POST", c.submitter+"/queues/reports/resume", nil); code != http.StatusOK || out["paused"] != false {
		t.Fatalf("resume: %d %v", code, out)
	}
	c.waitStatus(held, "completed", 30*time.Second)
	if j := c.job(elsewhere); j["status"] != "pending" {
		t.Fatalf("the other queue's job: %v; want still pending", j["status"])
	}
}
