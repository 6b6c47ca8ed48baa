package e2e

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestConformanceTypeScript builds the TypeScript SDK (sdk/typescript:
// npm ci when its node_modules is missing or older than its lockfile, then
// npm run build), runs its own tests (npm test: the worker's rules against
// a private redis-server, the client against a tiny HTTP server), then the
// conformance suite against its conformance worker
// (dist/examples/conformance_worker.js).
func TestConformanceTypeScript(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "sdk", "typescript")
	// t.Context, not a deferred cancel: npm_test runs after this function returns.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	t.Cleanup(cancel)
	stale, err := npmInstallStale(dir)
	if err != nil {
		t.Fatal(err)
	}
	if stale {
		npm(ctx, t, dir, "ci", "--no-audit", "--no-fund")
	}
	npm(ctx, t, dir, "run", "build")
	t.Run("npm_test", func(t *testing.T) {
		t.Parallel()
		npm(ctx, t, dir, "test")
	})
	runConformance(t, conformanceSDK{Name: "typescript",
		Command: []string{"node", "sdk/typescript/dist/examples/conformance_worker.js"}})
}

// npmInstallStale reports whether dir's node_modules is missing or older
// than its package-lock.json (npm writes node_modules/.package-lock.json
// last on every install).
func npmInstallStale(dir string) (bool, error) {
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return false, err
	}
	installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return installed.ModTime().Before(lock.ModTime()), nil
}

// npm runs npm with args in dir, logs its output and fails t if it fails.
func npm(ctx context.Context, t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "npm", args...)
	cmd.Dir = dir
	// When ctx ends, kill npm's whole process group: killing npm alone
	// leaves the node processes it started holding the output pipe, and
	// CombinedOutput would wait for them past every deadline.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("npm %v in %s:\n%s", args, dir, out)
	if err != nil {
		t.Fatalf("npm %v failed: %v", args, err)
	}
}
