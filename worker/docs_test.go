package worker_test

import (
	"fmt"
	"testing"

	"github.com/dtsched/dts/internal/envconf"
	"github.com/dtsched/dts/internal/testkit"
	"github.com/dtsched/dts/worker"
	"github.com/dtsched/dts/worker/builtin"
)

// TestOperationsDocDefaults: docs/operations.md's worker table gives each
// variable the default cmd/worker's flag takes from the constants of this
// package and of builtin.
func TestOperationsDocDefaults(t *testing.T) {
	t.Parallel()
	doc := testkit.OperationsDefaults(t, "../docs/operations.md", "### worker")
	for env, want := range map[string]string{
		"WORKER_ADDR":         worker.DefaultAddr,
		"REDIS_URL":           envconf.DefaultRedisURL,
		"WORKER_CONCURRENCY":  fmt.Sprint(worker.DefaultConcurrency),
		"WORKER_PREFETCH":     fmt.Sprint(worker.DefaultPrefetch),
		"WORKER_PREFETCH_MAX": fmt.Sprint(worker.DefaultPrefetchMax),
		"HEARTBEAT_INTERVAL":  testkit.DocDuration(worker.DefaultHeartbeatInterval),
		"SHUTDOWN_GRACE":      testkit.DocDuration(worker.DefaultShutdownGrace),
		"WORKER_FALLBACK":     fmt.Sprint(builtin.DefaultFallback),
		"FALLBACK_MAX":        testkit.DocDuration(builtin.DefaultFallbackMax),
		"NETWORK_TASK_URL":    builtin.DefaultNetworkURL,
		"CPU_WORK":            testkit.DocDuration(builtin.DefaultCPUWork),
		"WEBHOOK_TIMEOUT":     testkit.DocDuration(builtin.DefaultWebhookTimeout),
	} {
		if got, ok := doc[env]; !ok || got != want {
			t.Errorf("docs/operations.md: %s default %q, want %q", env, got, want)
		}
	}
}
