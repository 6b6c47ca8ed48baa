package integration_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/cli/command"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/worker"
)

func TestWorkersDrain(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.run(map[string]worker.HandlerFunc{"echo": func(ctx context.Context, j *worker.Job) (any, error) { return nil, nil }})
	testwait.For(t, 10*time.Second, "w1 recorded", func() bool { return s.dtsctl("workers", "ls", "-q").stdout == "w1\n" })
	golden(t, "workers_drain.golden", s.ok("workers", "drain", "w1"))
	var w map[string]any
	testwait.For(t, 10*time.Second, "w1 draining", func() bool {
		_ = json.Unmarshal([]byte(s.ok("workers", "get", "w1", "-o", "json")), &w)
		return w["state"] == "draining"
	})
	if w["drain_requested_by"] != "anonymous" || w["drain_requested_at"] == nil {
		t.Errorf("drained worker %v", w)
	}
	if r := s.dtsctl("workers", "drain", "nope"); r.code != command.ExitNotFound || !strings.Contains(r.stderr, "not_found") {
		t.Errorf("drain unknown: exit %d %s", r.code, r.stderr)
	}
	if got := s.ok("workers", "undrain", "w1"); !strings.HasPrefix(got, "w1: drain withdrawn (state ") {
		t.Errorf("undrain: %q", got)
	}
	testwait.For(t, 10*time.Second, "w1 available again", func() bool {
		w = nil
		_ = json.Unmarshal([]byte(s.ok("workers", "get", "w1", "-o", "json")), &w)
		return w["state"] == "available"
	})
	if w["drain_requested_at"] != nil || w["drain_requested_by"] != nil {
		t.Errorf("undrained worker %v", w)
	}
	if r := s.dtsctl("workers", "undrain", "nope"); r.code != command.ExitNotFound || !strings.Contains(r.stderr, "not_found") {
		t.Errorf("undrain unknown: exit %d %s", r.code, r.stderr)
	}
	audit := s.ok("audit", "ls", "-o", "jsonl")
	for _, action := range []string{"worker.drain", "worker.undrain"} {
		if !strings.Contains(audit, `"action":"`+action+`","target_type":"worker","target_id":"w1"`) {
			t.Errorf("audit log lacks the %s:\n%s", action, audit)
		}
	}
}

func TestBulkBackgroundOperations(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	for range 4 {
		s.ok("submit", "a", "--delay", "1h")
	}
	if got := s.ok("jobs", "cancel", "--name", "a", "--dry-run", "--background"); got != "4\n" {
		t.Errorf("--dry-run --background = %q, want 4", got)
	}
	if r := s.dtsctl("jobs", "cancel", "1", "--background"); r.code != command.ExitUsage {
		t.Errorf("--background with ids: exit %d", r.code)
	}
	id := strings.TrimSpace(s.ok("jobs", "cancel", "--name", "a", "--yes", "--background", "-q"))
	if id == "" {
		t.Fatal("no operation id")
	}
	testwait.For(t, 10*time.Second, "the operation to end", func() bool {
		var op map[string]any
		_ = json.Unmarshal([]byte(s.ok("operations", "get", id, "-o", "json")), &op)
		return op["state"] == "done"
	})
	golden(t, "operations_get.golden", s.ok("operations", "get", id))
	if got := s.ok("jobs", "ls", "--status", "canceled", "-q"); got != "4\n3\n2\n1\n" {
		t.Errorf("canceled jobs %q", got)
	}
	if got := s.ok("operations", "ls", "-q"); got != id+"\n" {
		t.Errorf("operations ls -q = %q", got)
	}
	if r := s.dtsctl("operations", "cancel", id); r.code != command.ExitError || !strings.Contains(r.stderr, "conflict") {
		t.Errorf("cancel an ended operation: exit %d %s", r.code, r.stderr)
	}
	if got := s.ok("jobs", "cancel", "--name", "a", "--yes", "--background"); got != "cancel: no job matches\n" {
		t.Errorf("nothing left: %q", got)
	}
}
