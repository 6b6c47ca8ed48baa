package integration_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/coordinator"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/worker"
	"github.com/dtsched/dts/worker/builtin"
)

// TestReadmeWalkthrough runs the README's walkthrough block, as bash with
// set -eu, against a submitter, a coordinator and a worker with the
// built-in handlers (as make up runs them): every curl must get a 2xx, so
// an id that matches no job fails it. Only the addresses and dtsctl's path
// are rewritten (and dtsctl's default server); the one command expected to fail, the watch of the job
// that fails, must exit 1.
func TestReadmeWalkthrough(t *testing.T) {
	t.Parallel()
	realCurl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("the README's walkthrough needs curl: %v", err)
	}
	s := newStack(t)
	coord := s.start(func(w *worker.Worker) { builtin.Register(w, builtin.Config{}) }, func(c *coordinator.Config) {
		c.Backoff = job.Backoff{Base: 20 * time.Millisecond, Cap: 100 * time.Millisecond} // the failing job's retries
	})

	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	block := walkthrough(t, filepath.Join(root, "README.md"))
	const watch = "bin/dtsctl jobs watch $BAD\n"
	if !strings.Contains(block, watch) {
		t.Fatalf("the walkthrough no longer watches the failing job (%q); update this test:\n%s", watch, block)
	}
	block = strings.Replace(block, watch, strings.TrimSuffix(watch, "\n")+" && exit 9 || test $? -eq 1\n", 1)
	tmp := t.TempDir()
	block = strings.NewReplacer("bin/dtsctl", filepath.Join(tmp, "bin", "dtsctl"),
		"localhost:8000", strings.TrimPrefix(s.url, "http://"), "localhost:9000", coord).Replace(block)

	// curl fails on an HTTP error, so that set -e stops at a wrong id.
	binDir := filepath.Join(tmp, "path")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nexec %s --fail-with-body -sS \"$@\"\n", realCurl)
	if err := os.WriteFile(filepath.Join(binDir, "curl"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "bash", "-c", "set -eu\n"+block)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"DTSCTL_SERVER="+s.url, "DTSCTL_CONFIG=/dev/null") // dtsctl's default server is localhost:8000
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the walkthrough failed: %v\n%s\nblock:\n%s", err, out, block)
	}
	for _, want := range []string{`"status":"pending"`, `"reason":"max_retries_exceeded"`, `"role":"leader"`, `"worker_id":"w1"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the walkthrough's output lacks %s:\n%s", want, out)
		}
	}
	// The sleep job is canceled at once while still pending, or asked to
	// stop once a worker holds it: which one depends on who is quicker.
	if !strings.Contains(string(out), `"cancel_requested":true`) && !strings.Contains(string(out), `"status":"canceled"`) {
		t.Errorf("the walkthrough's output shows no cancel (neither \"cancel_requested\":true nor \"status\":\"canceled\"):\n%s", out)
	}
}

// walkthrough is the first shell block after the README's "## Walkthrough".
func walkthrough(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## Walkthrough\n")
	if !ok {
		t.Fatalf("%s has no Walkthrough section", path)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("no shell block in the Walkthrough of %s", path)
	}
	return block
}
