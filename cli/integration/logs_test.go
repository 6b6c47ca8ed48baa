package integration_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/cli/command"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/worker"
)

// TestJobsLogs: what a handler logs with Job.Logger reaches GET
// /jobs/{id}/logs and dtsctl jobs logs: while the attempt runs (--follow
// prints it, then the lines sent with the result, and returns once the
// job has ended), as a table or the API's JSON; --attempt selects an
// attempt; an unknown job exits not found and a bad attempt is a 400.
func TestJobsLogs(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	release := make(chan struct{})
	s.run(map[string]worker.HandlerFunc{
		"chatty": func(ctx context.Context, j *worker.Job) (any, error) {
			log := j.Logger()
			log.Info("fetching", "url", "https://example.com/a b")
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			log.Warn("done", "bytes", 5120)
			return nil, nil
		},
	})
	id := strings.TrimSpace(s.ok("submit", "chatty", "-q"))

	followed := make(chan result, 1)
	go func() { followed <- s.dtsctl("jobs", "logs", id, "--follow", "--interval", "50ms") }()
	// The running attempt's first line arrives with a report of its own.
	testwait.For(t, 20*time.Second, "the running attempt's line to show", func() bool {
		return strings.Contains(s.ok("jobs", "logs", id), "fetching")
	})
	close(release)
	var r result
	select {
	case r = <-followed:
	case <-time.After(30 * time.Second):
		t.Fatal("jobs logs --follow did not return after the job ended")
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 2 || !strings.Contains(lines[0], `INFO   #1  fetching url="https://example.com/a b"`) ||
		!strings.Contains(lines[1], "WARN   #1  done bytes=5120") {
		t.Fatalf("--follow: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	got := decode(t, []byte(s.ok("jobs", "logs", id, "-o", "json")))
	if want := s.api("/jobs/" + id + "/logs"); !reflect.DeepEqual(got, want) {
		t.Errorf("-o json = %v\nwant the API's %v", got, want)
	}
	if out := s.ok("jobs", "logs", id, "--attempt", "2"); out != "" {
		t.Errorf("--attempt 2 printed %q; the job had one attempt", out)
	}
	if r := s.dtsctl("jobs", "logs", "999999"); r.code != command.ExitNotFound {
		t.Errorf("unknown job: exit %d, want %d", r.code, command.ExitNotFound)
	}
	for _, q := range []string{"attempt=0", "attempt=x", "after=-1", "limit=5001"} {
		resp, err := http.Get(s.url + "/jobs/" + id + "/logs?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("?%s: status %d, want 400", q, resp.StatusCode)
		}
	}
}
