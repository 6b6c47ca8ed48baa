package submitter_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/envconf"
	"github.com/dtsched/dts/internal/testkit"
	"github.com/dtsched/dts/submitter"
)

// TestOperationsDocDefaults: docs/operations.md's submitter table gives
// each variable the default cmd/submitter's flag takes from this package's
// constants.
func TestOperationsDocDefaults(t *testing.T) {
	t.Parallel()
	doc := testkit.OperationsDefaults(t, "../docs/operations.md", "### submitter")
	for env, want := range map[string]string{
		"SUBMITTER_ADDR":          submitter.DefaultAddr,
		"DATABASE_URL":            envconf.DefaultDatabaseURL,
		"REDIS_URL":               envconf.DefaultRedisURL,
		"MAX_PAYLOAD_BYTES":       fmt.Sprint(submitter.DefaultMaxPayloadBytes),
		"RATE_LIMIT_RPS":          fmt.Sprint(submitter.DefaultRateLimitRPS),
		"RATE_LIMIT_BURST":        fmt.Sprint(submitter.DefaultRateLimitBurst),
		"MAX_CONCURRENT_REQUESTS": fmt.Sprint(submitter.DefaultMaxConcurrentRequests),
		"MAX_BACKLOG":             fmt.Sprint(submitter.DefaultMaxBacklog),
		"UI_BASE_PATH":            submitter.DefaultUIBasePath,
		"GRAFANA_URL":             fmt.Sprintf("%q", submitter.DefaultGrafanaURL),
	} {
		got, ok := doc[env]
		if !ok || (got != want && !strings.HasPrefix(got, want+" (")) {
			t.Errorf("docs/operations.md: %s default %q, want %q", env, got, want)
		}
	}
}
