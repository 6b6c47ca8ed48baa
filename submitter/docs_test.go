package submitter_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/envconf"
	"github.com/dtsched/dts/submitter"
)

// TestOperationsDocDefaults: docs/operations.md's submitter table gives
// each variable the default cmd/submitter's flag takes from this package's
// constants.
func TestOperationsDocDefaults(t *testing.T) {
	t.Parallel()
	doc := docDefaults(t, "../docs/operations.md", "### submitter")
	for env, want := range map[string]string{
		"SUBMITTER_ADDR":          submitter.DefaultAddr,
		"DATABASE_URL":            envconf.DefaultDatabaseURL,
		"REDIS_URL":               envconf.DefaultRedisURL,
		"MAX_PAYLOAD_BYTES":       fmt.Sprint(submitter.DefaultMaxPayloadBytes),
		"RATE_LIMIT_RPS":          fmt.Sprint(submitter.DefaultRateLimitRPS),
		"RATE_LIMIT_BURST":        fmt.Sprint(submitter.DefaultRateLimitBurst),
		"MAX_CONCURRENT_REQUESTS": fmt.Sprint(submitter.DefaultMaxConcurrentRequests),
		"MAX_BACKLOG":             fmt.Sprint(submitter.DefaultMaxBacklog),
	} {
		got, ok := doc[env]
		if !ok || (got != want && !strings.HasPrefix(got, want+" (")) {
			t.Errorf("docs/operations.md: %s default %q, want %q", env, got, want)
		}
	}
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
