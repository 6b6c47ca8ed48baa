package worker_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/envconf"
	"github.com/dtsched/dts/worker"
	"github.com/dtsched/dts/worker/builtin"
)

// TestOperationsDocDefaults: docs/operations.md's worker table gives each
// variable the default cmd/worker's flag takes from the constants of this
// package and of builtin.
func TestOperationsDocDefaults(t *testing.T) {
	t.Parallel()
	doc := docDefaults(t, "../docs/operations.md", "### worker")
	for env, want := range map[string]string{
		"WORKER_ADDR":        worker.DefaultAddr,
		"REDIS_URL":          envconf.DefaultRedisURL,
		"WORKER_CONCURRENCY": fmt.Sprint(worker.DefaultConcurrency),
		"HEARTBEAT_INTERVAL": docDuration(worker.DefaultHeartbeatInterval),
		"SHUTDOWN_GRACE":     docDuration(worker.DefaultShutdownGrace),
		"WORKER_FALLBACK":    fmt.Sprint(builtin.DefaultFallback),
		"FALLBACK_MAX":       docDuration(builtin.DefaultFallbackMax),
		"NETWORK_TASK_URL":   builtin.DefaultNetworkURL,
		"CPU_WORK":           docDuration(builtin.DefaultCPUWork),
		"WEBHOOK_TIMEOUT":    docDuration(builtin.DefaultWebhookTimeout),
	} {
		if got, ok := doc[env]; !ok || got != want {
			t.Errorf("docs/operations.md: %s default %q, want %q", env, got, want)
		}
	}
}

// docDuration writes d as the docs do: 24h, 5m, 250ms.
func docDuration(d time.Duration) string {
	s := d.String()
	if h, ok := strings.CutSuffix(s, "h0m0s"); ok {
		return h + "h"
	}
	if m, ok := strings.CutSuffix(s, "m0s"); ok {
		return m + "m"
	}
	return s
}

// docDefaults reads the flag table under heading in a Markdown file:
// environment variable → default, backticks removed.
func docDefaults(t *testing.T, path, heading string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s: no %q", path, heading)
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	defaults := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		cols := strings.Split(line, " | ")
		if len(cols) < 4 || !strings.HasPrefix(line, "| ") {
			continue
		}
		defaults[strings.Trim(cols[1], "`")] = strings.ReplaceAll(cols[2], "`", "")
	}
	if len(defaults) < 5 {
		t.Fatalf("%s: found only %d rows under %q", path, len(defaults), heading)
	}
	return defaults
}
