package coordinator

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
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
// docs/architecture.md names as a proof exists in the repository, in the
// package the table names (store.TestX: a test of package store), so a
// renamed, moved or deleted test cannot leave a promise proved by nothing
// or a reader looking in the wrong place.
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
	defined := map[string]map[string]bool{} // test name -> packages that define it
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg := ""
		if m := packageClause.FindSubmatch(src); m != nil {
			pkg = strings.TrimSuffix(string(m[1]), "_test")
		}
		for _, m := range testFunc.FindAllSubmatch(src, -1) {
			if defined[string(m[1])] == nil {
				defined[string(m[1])] = map[string]bool{}
			}
			defined[string(m[1])][pkg] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, m := range testName.FindAllStringSubmatch(table, -1) {
		named++
		pkgs := defined[m[2]]
		if pkgs == nil {
			t.Errorf("docs/architecture.md's Guarantees table names %s, which no _test.go file defines", m[2])
			continue
		}
		if prefix := m[1]; prefix != "" {
			pkg := path.Base(strings.TrimSuffix(prefix, "."))
			if !pkgs[pkg] {
				t.Errorf("docs/architecture.md's Guarantees table names %s, but package %s has no such test (it is in %v)",
					m[0], pkg, slices.Sorted(maps.Keys(pkgs)))
			}
		}
	}
	if named < 20 {
		t.Fatalf("found only %d test names in the Guarantees table", named)
	}
}

var (
	testFunc = regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	testName = regexp.MustCompile("`((?:[a-z/]+\\.)?)(Test[A-Za-z0-9_]+)`")

	packageClause = regexp.MustCompile(`(?m)^package ([A-Za-z0-9_]+)`)
)
