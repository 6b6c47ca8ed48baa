package e2e

import (
	"net/http"
	"testing"
	"time"
)

// startSDKWorker starts sdkworker, a worker written with the Go library
// that handles only the given job names.
func (c *cluster) startSDKWorker(id, names string, env ...string) *proc {
	return c.start(id, "sdkworker", "WORKER_ADDR", append([]string{"WORKER_ID=" + id, "SDK_JOB_NAMES=" + names}, env...)...)
}

// TestCustomWorkerBesideBuiltinsIsServed: a user's worker whose only job
// name sorts after every built-in name joins a fleet of idle built-in
// workers (whose free slots and prefetch outnumber one round's offer), and
// its jobs start within a second, while built-in jobs keep running.
func TestCustomWorkerBesideBuiltinsIsServed(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startSubmitter()
	c.startCoordinator("coord-1")
	c.startWorker("builtin-1")
	c.startWorker("builtin-2")
	c.startSDKWorker("shouter", "zz_shout", "HEARTBEAT_INTERVAL=200ms")
	c.eventually(10*time.Second, "shouter listed by the leader", func() bool {
		code, _ := c.do("GET", c.submitter+"/workers/shouter", nil)
		return code == http.StatusOK
	})

	var ids []string
	for range 5 {
		ids = append(ids, c.submit(map[string]any{"name": "zz_shout", "payload": "hello"}))
		c.submit(map[string]any{"name": "noop"})
	}
	for _, id := range ids {
		j := c.waitStatus(id, "completed", 10*time.Second)
		created, _ := time.Parse(time.RFC3339Nano, j["created_at"].(string))
		started, _ := time.Parse(time.RFC3339Nano, j["started_at"].(string))
		if wait := started.Sub(created); wait > time.Second {
			t.Errorf("job %s started %v after it was created, want within 1s", id, wait)
		}
		if j["worker_id"] != "shouter" {
			t.Errorf("job %s ran on %v, want shouter", id, j["worker_id"])
		}
		if res, _ := j["result"].(map[string]any); res["shout"] != "HELLO" {
			t.Errorf("job %s result = %v, want shout HELLO", id, j["result"])
		}
	}
}
