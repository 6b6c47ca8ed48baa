package e2e

import (
	"net/http"
	"sort"
	"testing"
	"time"
)

// TestLimits drives a concurrency limit through the real binaries: a key
// limited to 1 over HTTP runs its jobs one after another on a worker with
// four slots (each starts after the one before finished, by PostgreSQL's
// clock), while jobs without a limit run beside them; GET /limits shows
// the key, and each job its limit_key.
func TestLimits(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1", "WORKER_CONCURRENCY=4")

	code, out := c.do("PUT", c.submitter+"/limits/one-at-a-time", map[string]any{"concurrency": 1})
	if code != http.StatusOK || out["concurrency"] != 1.0 {
		t.Fatalf("PUT /limits: %d %v", code, out)
	}
	var keyed, free []string
	for range 3 {
		keyed = append(keyed, c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 0.4},
			"concurrency_key": "one-at-a-time"}))
	}
	for range 2 {
		free = append(free, c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 0.4}}))
	}
	type run struct{ start, end time.Time }
	var runs []run
	for _, id := range keyed {
		j := c.waitStatus(id, "completed", 30*time.Second)
		if j["limit_key"] != "one-at-a-time" {
			t.Errorf("job %s: limit_key %v", id, j["limit_key"])
		}
		start, err1 := time.Parse(time.RFC3339Nano, j["started_at"].(string))
		end, err2 := time.Parse(time.RFC3339Nano, j["finished_at"].(string))
		if err1 != nil || err2 != nil {
			t.Fatalf("job %s times: %v %v", id, err1, err2)
		}
		runs = append(runs, run{start, end})
	}
	for _, id := range free {
		if j := c.waitStatus(id, "completed", 30*time.Second); j["limit_key"] != nil {
			t.Errorf("unlimited job %s: limit_key %v", id, j["limit_key"])
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].start.Before(runs[j].start) })
	for i := 1; i < len(runs); i++ {
		if runs[i].start.Before(runs[i-1].end) {
			t.Errorf("keyed job %d started at %v, before the one before it finished (%v): the limit of 1 did not hold",
				i, runs[i].start, runs[i-1].end)
		}
	}
	code, out = c.do("GET", c.submitter+"/limits", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /limits: %d %v", code, out)
	}
	ls := out["limits"].([]any)
	if len(ls) != 1 || ls[0].(map[string]any)["key"] != "one-at-a-time" {
		t.Fatalf("GET /limits = %v", out)
	}
}
