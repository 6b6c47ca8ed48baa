package submitter_test

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/envconf"
	"github.com/dtsched/dts/internal/testkit"
	"github.com/dtsched/dts/internal/wire"
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

// TestAPIDocJobFields: docs/api.md's "Get a job" section names every JSON
// field of the job object (wire.Job), in its example or its table, and
// the "Submit a job" section every field of a submission
// (wire.SubmitRequest) and the traceparent header a job's trace comes
// from: a field added to the API without a word in the docs fails here.
func TestAPIDocJobFields(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, c := range []struct {
		heading string
		typ     reflect.Type
		extra   []string // names that are no JSON field
	}{
		{"### Get a job: ", reflect.TypeFor[wire.Job](), nil},
		{"### Submit a job: ", reflect.TypeFor[wire.SubmitRequest](), []string{"traceparent"}},
	} {
		section := docSection(t, doc, c.heading)
		names := c.extra
		for f := range c.typ.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				names = append(names, name)
			}
		}
		for _, name := range names {
			if !strings.Contains(section, "`"+name+"`") && !strings.Contains(section, `"`+name+`":`) {
				t.Errorf("docs/api.md %q does not name %s (neither `%s` nor \"%s\":)", strings.TrimPrefix(c.heading, "### "), name, name, name)
			}
		}
	}
}

// docSection returns the section of doc under the heading that starts
// with heading, up to the next heading of its level or above.
func docSection(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading)
	if i < 0 {
		t.Fatalf("docs/api.md has no heading %q", heading)
	}
	rest := doc[i+1+len(heading):]
	for _, next := range []string{"\n### ", "\n## "} {
		if j := strings.Index(rest, next); j >= 0 {
			rest = rest[:j]
		}
	}
	return rest
}
