package integration_test

import (
	"strings"
	"testing"

	"github.com/dtsched/dts/cli/command"
)

// --queue keeps one queue's jobs wherever jobs are listed or acted on by
// filter. The API runs a bulk action by queue only in the background, so
// --yes waits for the operation and answers as an action run at once.
func TestQueueFilter(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	for _, q := range []string{"reports", "default", "reports", "default", "reports"} {
		s.ok("submit", "a", "--queue", q, "--delay", "1h")
	}
	if got := s.ok("jobs", "ls", "--queue", "reports", "-q"); got != "5\n3\n1\n" {
		t.Errorf("jobs ls --queue reports -q = %q", got)
	}
	if got := s.ok("jobs", "ls", "--queue", "reports", "--name", "a", "--status", "pending", "--limit", "1", "--all", "-q"); got != "5\n3\n1\n" {
		t.Errorf("jobs ls --queue reports --all = %q", got)
	}
	if got := s.ok("jobs", "cancel", "--queue", "reports", "--dry-run"); got != "3\n" {
		t.Errorf("cancel --queue reports --dry-run = %q", got)
	}
	if got := s.ok("jobs", "cancel", "--queue", "reports", "--yes"); got != "cancel: 3 of 3 jobs\n" {
		t.Errorf("cancel --queue reports --yes = %q", got)
	}
	if got := s.ok("jobs", "ls", "--status", "canceled", "-q"); got != "5\n3\n1\n" {
		t.Errorf("canceled after cancel --queue: %q", got)
	}
	if got := s.ok("jobs", "cancel", "--queue", "reports", "--yes"); got != "cancel: 0 of 0 jobs\n" {
		t.Errorf("a second cancel --queue reports --yes = %q", got)
	}
	op := decode(t, []byte(s.ok("jobs", "delete", "--queue", "reports", "--yes", "-o", "json"))).(map[string]any)
	if op["state"] != "done" || op["affected"] != 3.0 || op["queue"] != "reports" || op["action"] != "delete" {
		t.Errorf("delete --queue reports --yes -o json = %v", op)
	}
	if got := s.ok("jobs", "ls", "-q"); got != "4\n2\n" {
		t.Errorf("jobs left: %q", got)
	}
	if got := s.ok("dlq", "purge", "--queue", "default", "--dry-run"); got != "0\n" {
		t.Errorf("dlq purge --queue default --dry-run = %q", got)
	}
	if r := s.dtsctl("jobs", "cancel", "2", "--queue", "default"); r.code != command.ExitUsage {
		t.Errorf("ids and --queue: exit %d %s", r.code, r.stderr)
	}
	if r := s.dtsctl("jobs", "cancel", "--queue", "default"); r.code != command.ExitUsage || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("--queue without --yes: exit %d %s", r.code, r.stderr)
	}
	if r := s.dtsctl("jobs", "ls", "--queue", "bad name"); r.code != command.ExitError || !strings.Contains(r.stderr, "invalid_field") {
		t.Errorf("a bad queue name: exit %d %s", r.code, r.stderr)
	}
}
