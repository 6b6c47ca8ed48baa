package integration_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dtsched/dts/cli/command"
	"github.com/dtsched/dts/worker"
)

// TestDLQListByQueue: dtsctl dlq ls --queue lists one queue's failed jobs
// (GET /dlq?queue=), the most recently failed first, across pages with
// --all; a queue without failed jobs lists none, a bad queue name is the
// server's invalid_field.
func TestDLQListByQueue(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.run(map[string]worker.HandlerFunc{
		"report": func(ctx context.Context, j *worker.Job) (any, error) {
			return nil, worker.Permanent(errors.New("no such report"))
		},
	})
	// One at a time, so that they fail in id order.
	for _, q := range []string{"reports", "default", "reports"} {
		id := strings.TrimSpace(s.ok("submit", "report", "--queue", q, "-q"))
		if r := s.dtsctl("jobs", "watch", id, "--interval", "50ms"); r.code != command.ExitError {
			t.Fatalf("job %s did not die: exit %d %s%s", id, r.code, r.stdout, r.stderr)
		}
	}
	s.ok("submit", "report", "--queue", "reports", "--delay", "1h") // live: not listed

	golden(t, "dlq_ls_queue.golden", s.ok("dlq", "ls", "--queue", "reports"))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "ls", "--queue", "reports", "--limit", "1", "--all", "-q"}, "3\n1\n"},
		{[]string{"dlq", "ls", "--queue", "default", "-q"}, "2\n"},
		{[]string{"dlq", "ls", "--queue", "nosuch", "-q"}, ""},
		{[]string{"dlq", "ls", "-q"}, "3\n2\n1\n"},
	} {
		if got := s.ok(c.args...); got != c.want {
			t.Errorf("dtsctl %s = %q, want %q", strings.Join(c.args, " "), got, c.want)
		}
	}
	page := decode(t, []byte(s.ok("dlq", "ls", "--queue", "reports", "--limit", "1", "-o", "json"))).(map[string]any)
	if jobs := page["jobs"].([]any); len(jobs) != 1 || jobs[0].(map[string]any)["queue"] != "reports" || page["next_cursor"] == nil {
		t.Errorf("dlq ls --queue reports --limit 1 -o json = %v", page)
	}
	if r := s.dtsctl("dlq", "ls", "--queue", "bad name"); r.code != command.ExitError || !strings.Contains(r.stderr, "invalid_field") {
		t.Errorf("a bad queue name: exit %d %s", r.code, r.stderr)
	}
}
