package coordinator

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/envconf"
	"github.com/dtsched/dts/internal/job"
)

// TestOperationsDocDefaults: docs/operations.md's coordinator table gives
// each variable the default cmd/coordinator's flag takes from this
// package's constants.
func TestOperationsDocDefaults(t *testing.T) {
	t.Parallel()
	doc := docDefaults(t, "../docs/operations.md", "### coordinator")
	for env, want := range map[string]string{
		"COORDINATOR_ADDR":    DefaultAddr,
		"DATABASE_URL":        envconf.DefaultDatabaseURL,
		"REDIS_URL":           envconf.DefaultRedisURL,
		"HEARTBEAT_INTERVAL":  docDuration(DefaultHeartbeatInterval),
		"HEARTBEAT_MISSES":    fmt.Sprint(DefaultHeartbeatMisses),
		"LEASE_DURATION":      docDuration(DefaultLeaseDuration),
		"BACKOFF_BASE":        docDuration(job.DefaultBackoff.Base),
		"BACKOFF_CAP":         docDuration(job.DefaultBackoff.Cap),
		"BACKOFF_JITTER":      fmt.Sprint(job.DefaultBackoff.Jitter),
		"POLL_INTERVAL":       docDuration(DefaultPollInterval),
		"CLAIM_BATCH":         fmt.Sprint(DefaultClaimBatch),
		"ELECTION_INTERVAL":   docDuration(DefaultElectionInterval),
		"LEADER_TTL":          fmt.Sprintf("%d × ELECTION_INTERVAL", DefaultLeaderTTLIntervals),
		"RETENTION_COMPLETED": docDuration(DefaultRetentionCompleted),
		"RETENTION_FAILED":    docDuration(DefaultRetentionFailed),
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
		env := strings.Trim(cols[1], "`")
		defaults[env] = strings.ReplaceAll(cols[2], "`", "")
	}
	if len(defaults) < 5 {
		t.Fatalf("%s: found only %d rows under %q", path, len(defaults), heading)
	}
	return defaults
}
