package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStressScripts runs the load scripts users run (scripts/) against a
// cluster, each with a small count, and checks that each exits 0 (every
// submission accepted, every job final in time, and send_failing_jobs.sh's
// own check: its invalid jobs dead, the others completed) and that each
// job it reported reached PostgreSQL. drain_benchmark.sh counts the jobs
// /stats reports completed.
func TestStressScripts(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startSubmitter()
	c.startCoordinator("coord-1")
	c.startWorker("worker-1", "WORKER_CONCURRENCY=8", "NETWORK_TASK_URL="+c.submitter+"/healthz")
	dir := filepath.Join(repoRoot(t), "scripts")
	scripts := []script{
		{"send_cpu_intensive_jobs.sh", 5, nil},
		{"send_io_intensive_jobs.sh", 5, nil},
		{"send_network_intensive_jobs.sh", 5, nil},
		{"send_failing_jobs.sh", 7, []string{"PHASE_PAUSE=0"}},
		{"high_volume_stress_test.sh", 30, []string{"SEED=7", "BATCH_SIZE=10"}},
		{"drain_benchmark.sh", 300, []string{"BATCH_SIZE=100"}},
	}
	total := 0
	for _, s := range scripts {
		total += s.count
	}
	together(t, scripts, 4, func(s script) string { return s.script }, func(t *testing.T, s script) {
		cmd := exec.CommandContext(ctxT(t, 3*time.Minute), "bash", filepath.Join(dir, s.script))
		cmd.Env = append(os.Environ(), "SUBMITTER_URL="+c.submitter, fmt.Sprint("COUNT=", s.count),
			"DELAY=0", "POLL_INTERVAL=1", "WAIT=90")
		cmd.Env = append(cmd.Env, s.env...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Logf("%.1f s, last line: %s", time.Since(start).Seconds(), lastLine(out))
	})
	if t.Failed() {
		return
	}
	conn, err := pgx.Connect(t.Context(), c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != total {
		t.Errorf("%d jobs in PostgreSQL, want %d (the scripts' counts)", n, total)
	}
}

// script is one load script and how TestStressScripts runs it.
type script struct {
	script string
	count  int
	env    []string
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
