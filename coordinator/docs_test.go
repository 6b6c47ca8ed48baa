package coordinator

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// TestGuaranteesNameRealTests: every test the Guarantees table of
// docs/architecture.md names as a proof exists in the repository, so a
// renamed or deleted test cannot leave a promise proved by nothing.
func TestGuaranteesNameRealTests(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## Guarantees\n")
	if !ok {
		t.Fatal("docs/architecture.md has no Guarantees section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	defined := map[string]bool{}
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllSubmatch(src, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, m := range testName.FindAllStringSubmatch(table, -1) {
		named++
		if !defined[m[1]] {
			t.Errorf("docs/architecture.md's Guarantees table names %s, which no _test.go file defines", m[1])
		}
	}
	if named < 20 {
		t.Fatalf("found only %d test names in the Guarantees table", named)
	}
}

var (
	testFunc = regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	testName = regexp.MustCompile("`(?:[a-z/]+\\.)?(Test[A-Za-z0-9_]+)`")
)
