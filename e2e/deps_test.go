package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestDependencyChain: a three-level chain runs level by level through the
// real binaries; a failing chain cancels its descendants; a batch callback
// runs after every job of its batch with their outcomes.
func TestDependencyChain(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1")

	a := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 0.3}})
	b := c.submit(map[string]any{"name": "cpu_intensive", "payload": "x", "depends_on": []string{a}})
	cc := c.submit(map[string]any{"name": "noop", "depends_on": []string{b}})
	if s := c.job(cc)["status"]; s != "waiting" {
		t.Errorf("level 3 is %v right after submission, want waiting", s)
	}
	ja := c.waitStatus(a, "completed", 30*time.Second)
	jb := c.waitStatus(b, "completed", 30*time.Second)
	jc := c.waitStatus(cc, "completed", 30*time.Second)
	// Each level started after its parent finished.
	if !(ja["finished_at"].(string) <= jb["started_at"].(string) && jb["finished_at"].(string) <= jc["started_at"].(string)) {
		t.Errorf("levels overlapped: a finished %v, b started %v finished %v, c started %v",
			ja["finished_at"], jb["started_at"], jb["finished_at"], jc["started_at"])
	}

	// A parent that fails for good cancels its children and theirs.
	x := c.submit(map[string]any{"name": "test_job", "payload": "invalid_job_x", "max_retries": 0})
	y := c.submit(map[string]any{"name": "noop", "depends_on": []string{x}})
	z := c.submit(map[string]any{"name": "noop", "depends_on": []string{y}})
	c.waitStatus(x, "failed", 30*time.Second)
	if j := c.waitStatus(y, "canceled", 10*time.Second); j["last_error"] != fmt.Sprintf("parent job %s failed", x) {
		t.Errorf("y last_error %v", j["last_error"])
	}
	if j := c.waitStatus(z, "canceled", 10*time.Second); j["last_error"] != fmt.Sprintf("parent job %s was canceled", y) {
		t.Errorf("z last_error %v", j["last_error"])
	}

	// A batch with a callback.
	code, out := c.do("POST", c.submitter+"/submit_jobs", map[string]any{
		"jobs": []any{
			map[string]any{"name": "cpu_intensive", "payload": "x"},
			map[string]any{"name": "test_job", "payload": "invalid_job_y", "max_retries": 0},
			map[string]any{"name": "noop", "depends_on_index": []int{0}},
		},
		"callback": map[string]any{"name": "noop", "payload": map[string]any{"report": true}},
	})
	if code != 201 {
		t.Fatalf("batch with callback: %d %v", code, out)
	}
	cb := out["callback"].(map[string]any)["job_id"].(string)
	j := c.waitStatus(cb, "completed", 30*time.Second)
	p := j["payload"].(map[string]any)
	jobs, _ := p["jobs"].([]any)
	if len(jobs) != 3 || p["payload"].(map[string]any)["report"] != true {
		t.Fatalf("callback payload %v", p)
	}
	want := []string{"completed", "failed", "completed"}
	for i, e := range jobs {
		if e := e.(map[string]any); e["status"] != want[i] {
			t.Errorf("callback outcome %d: %v, want %s", i, e, want[i])
		}
	}
	if r, ok := jobs[0].(map[string]any)["result"].(map[string]any); !ok || r["hashes"] == nil {
		t.Errorf("callback outcome 0 has no result: %v", jobs[0])
	}
}
