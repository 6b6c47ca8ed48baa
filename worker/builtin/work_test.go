package builtin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtsched/dts/worker"
)

func TestCPUIntensive(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.CPUWork = 20 * time.Millisecond
	reg := register(t, cfg)
	start := time.Now()
	res, err := reg.handler(t, "cpu_intensive")(t.Context(), newJob("cpu_intensive", jsonString("cpu_heavy_task_1")))
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < cfg.CPUWork {
		t.Errorf("took %v, want at least CPUWork %v", el, cfg.CPUWork)
	}
	if n := res.(map[string]any)["hashes"].(int); n < hashBatch {
		t.Errorf("hashes = %d, want at least %d", n, hashBatch)
	}
}

func TestCPUIntensiveCancel(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.CPUWork = time.Hour
	reg := register(t, cfg)
	for _, name := range []string{"cpu_intensive", "mixed_workload"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			promptly(t, reg.handler(t, name), newJob(name, jsonString("cpu_heavy_task_1")))
		})
	}
	t.Cleanup(func() { assertDirEmpty(t, cfg.IODir) })
}

func TestIOIntensive(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	reg := register(t, cfg)
	res, err := reg.handler(t, "io_intensive")(t.Context(), newJob("io_intensive", jsonString("io_heavy_task_1")))
	if err != nil {
		t.Fatal(err)
	}
	m := res.(map[string]any)
	lines, size := m["lines"].(int64), m["bytes"].(int64)
	if lines < 1000 || lines > 9999 {
		t.Errorf("lines = %d, want 1000..9999", lines)
	}
	if size <= lines {
		t.Errorf("bytes = %d for %d lines", size, lines)
	}
	assertDirEmpty(t, cfg.IODir)
}

// TestIOIntensiveConcurrent runs many attempts at once, several with the same
// job id, in one directory: none may collide and none may leave a file.
func TestIOIntensiveConcurrent(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	reg := register(t, cfg)
	h := reg.handler(t, "io_intensive")
	var wg sync.WaitGroup
	errs := make([]error, 24)
	for i := range errs {
		wg.Go(func() {
			job := newJob("io_intensive", jsonString(fmt.Sprintf("io_heavy_task_%d", i)))
			job.ID = fmt.Sprint(i % 4)
			_, errs[i] = h(t.Context(), job)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("job %d: %v", i, err)
		}
	}
	assertDirEmpty(t, cfg.IODir)
}

func TestIOIntensiveCanceled(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	reg := register(t, cfg)
	for _, name := range []string{"io_intensive", "mixed_workload"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			_, err := reg.handler(t, name)(ctx, newJob(name, jsonString("io_heavy_task_1")))
			if !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want context.Canceled", err)
			}
		})
	}
	t.Cleanup(func() { assertDirEmpty(t, cfg.IODir) })
}

func TestIOIntensiveBadDir(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.IODir += "/missing"
	_, err := register(t, cfg).handler(t, "io_intensive")(t.Context(), newJob("io_intensive", jsonString("x")))
	if err == nil || worker.IsPermanent(err) {
		t.Errorf("err = %v, want a retryable error", err)
	}
}

func TestMixedWorkload(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	reg := register(t, cfg)
	res, err := reg.handler(t, "mixed_workload")(t.Context(), newJob("mixed_workload", jsonString("mixed_task_batch1_1")))
	if err != nil {
		t.Fatal(err)
	}
	m := res.(map[string]any)
	if m["hashes"].(int) <= 0 || m["lines"].(int64) < 1000 || m["bytes"].(int64) <= 0 {
		t.Errorf("result = %v", m)
	}
	assertDirEmpty(t, cfg.IODir)
}

func TestFileSafe(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"123", "123"},
		{"a-b_C", "a-b_C"},
		{"../../etc/passwd", "______etc_passwd"},
		{"", ""},
		{"é", "__"},
		{strings.Repeat("x", 100), strings.Repeat("x", 40)},
	}
	for _, tt := range tests {
		if got := fileSafe(tt.in); got != tt.want {
			t.Errorf("fileSafe(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
