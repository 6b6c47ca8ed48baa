package coordinator

import (
	"fmt"
	"testing"

	"github.com/dtsched/dts/internal/envconf"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/testkit"
)

// TestOperationsDocDefaults: docs/operations.md's coordinator table gives
// each variable the default cmd/coordinator's flag takes from this
// package's constants.
func TestOperationsDocDefaults(t *testing.T) {
	t.Parallel()
	doc := testkit.OperationsDefaults(t, "../docs/operations.md", "### coordinator")
	for env, want := range map[string]string{
		"COORDINATOR_ADDR":    DefaultAddr,
		"DATABASE_URL":        envconf.DefaultDatabaseURL,
		"REDIS_URL":           envconf.DefaultRedisURL,
		"HEARTBEAT_INTERVAL":  testkit.DocDuration(DefaultHeartbeatInterval),
		"HEARTBEAT_MISSES":    fmt.Sprint(DefaultHeartbeatMisses),
		"LEASE_DURATION":      testkit.DocDuration(DefaultLeaseDuration),
		"BACKOFF_BASE":        testkit.DocDuration(job.DefaultBackoff.Base),
		"BACKOFF_CAP":         testkit.DocDuration(job.DefaultBackoff.Cap),
		"BACKOFF_JITTER":      fmt.Sprint(job.DefaultBackoff.Jitter),
		"POLL_INTERVAL":       testkit.DocDuration(DefaultPollInterval),
		"CLAIM_BATCH":         fmt.Sprint(DefaultClaimBatch),
		"ELECTION_INTERVAL":   testkit.DocDuration(DefaultElectionInterval),
		"LEADER_TTL":          fmt.Sprintf("%d × ELECTION_INTERVAL", DefaultLeaderTTLIntervals),
		"RETENTION_COMPLETED": testkit.DocDuration(DefaultRetentionCompleted),
		"RETENTION_FAILED":    testkit.DocDuration(DefaultRetentionFailed),
		"SCHEDULE_GRACE":      testkit.DocDuration(DefaultScheduleGrace),
	} {
		if got, ok := doc[env]; !ok || got != want {
			t.Errorf("docs/operations.md: %s default %q, want %q", env, got, want)
		}
	}
}
