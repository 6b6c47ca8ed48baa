package e2e

import (
	"cmp"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// pythonBin is the Python the SDK runs on: Debian's, which python3-redis
// serves (not a python3 first on PATH); DTS_PYTHON names another.
func pythonBin() string { return cmp.Or(os.Getenv("DTS_PYTHON"), "/usr/bin/python3") }

// TestConformancePython runs the Python SDK's own tests (sdk/python/tests:
// the worker's rules against a private redis-server, the client against a
// tiny HTTP server), then the conformance suite against its conformance
// worker (sdk/python/examples/conformance_worker.py).
func TestConformancePython(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("unittest", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, pythonBin(), "-m", "unittest", "discover", "-s", "sdk/python/tests")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.CombinedOutput()
		t.Logf("%s -m unittest discover -s sdk/python/tests:\n%s", pythonBin(), out)
		if err != nil {
			t.Fatalf("the Python SDK's tests failed: %v", err)
		}
	})
	runConformance(t, conformanceSDK{Name: "python",
		Command: []string{pythonBin(), "sdk/python/examples/conformance_worker.py"},
		Env:     []string{"PYTHONPATH=" + filepath.Join(root, "sdk", "python", "src"), "PYTHONDONTWRITEBYTECODE=1"}})
}
