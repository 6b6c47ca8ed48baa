package integration_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dtsched/dts/cli/command"
	"github.com/dtsched/dts/worker"
)

// TestDLQRequeueWithPayload: dtsctl dlq requeue ID --payload (or
// --payload-file) requeues a dead job with a new payload, which then runs;
// JSON dtsctl cannot read is a usage error, one the server refuses an
// error, and neither changes the job.
func TestDLQRequeueWithPayload(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.run(map[string]worker.HandlerFunc{
		"picky": func(ctx context.Context, j *worker.Job) (any, error) {
			var p struct{ OK bool }
			if err := json.Unmarshal(j.Payload, &p); err != nil || !p.OK {
				return nil, worker.Permanent(errFailed)
			}
			return "fine", nil
		},
	})
	id := strings.TrimSpace(s.ok("submit", "picky", "--payload", `{"ok":false}`, "-q"))
	if r := s.dtsctl("jobs", "watch", id, "--interval", "50ms"); r.code != command.ExitError {
		t.Fatalf("the job did not die: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"dlq", "requeue", id, "--payload", `{"ok":`}, command.ExitUsage, "payload is not JSON"},
		{[]string{"dlq", "requeue", id, "--payload", `"\u0000"`}, command.ExitError, "invalid_field"},
		{[]string{"dlq", "requeue", id, id, "--payload", `{"ok":true}`}, command.ExitUsage, "give one ID"},
		{[]string{"dlq", "requeue", "--name", "picky", "--payload", `{"ok":true}`}, command.ExitUsage, "give one ID"},
		{[]string{"dlq", "requeue", id, "--payload", `1`, "--payload-file", "x"}, command.ExitUsage, "give one"},
	} {
		if r := s.dtsctl(c.args...); r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("dtsctl %s: exit %d %s, want %d %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.want)
		}
	}
	var j map[string]any
	json.Unmarshal([]byte(s.ok("jobs", "get", id, "-o", "json")), &j)
	if j["status"] != "failed" || j["payload"].(map[string]any)["ok"] != false {
		t.Fatalf("refused requeues changed the job: %v", j)
	}

	file := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(file, []byte("{\n  \"ok\": true,\n  \"note\": \"fixed by hand\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := s.ok("dlq", "requeue", id, "--payload-file", file); got != id+" pending\n" {
		t.Errorf("dlq requeue --payload-file = %q", got)
	}
	if r := s.dtsctl("jobs", "watch", id, "--interval", "50ms", "-o", "json"); r.code != 0 {
		t.Fatalf("the requeued job: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	json.Unmarshal([]byte(s.ok("jobs", "get", id, "-o", "json")), &j)
	if p := j["payload"].(map[string]any); p["ok"] != true || p["note"] != "fixed by hand" || j["result"] != "fine" {
		t.Errorf("after the requeue with a payload: %v", j)
	}
	if audit := s.ok("audit", "ls", "-o", "jsonl"); !strings.Contains(audit, `"payload_edited":true`) {
		t.Errorf("the audit log lacks the edited requeue:\n%s", audit)
	}
	// Once more by --payload, now that it is not dead: a conflict.
	if r := s.dtsctl("dlq", "requeue", id, "--payload", `{"ok":true}`); r.code != command.ExitError || !strings.Contains(r.stderr, "conflict") {
		t.Errorf("requeue a completed job: exit %d %s", r.code, r.stderr)
	}
}

// TestJobsTimeline: dtsctl jobs timeline shows a dead job's history as a
// table (its lease with the worker and a token, the failure, the dead
// letter) and, with -o json, exactly what GET /jobs/{id}/timeline answers;
// an unknown job is exit 3.
func TestJobsTimeline(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.run(map[string]worker.HandlerFunc{
		"doomed": func(ctx context.Context, j *worker.Job) (any, error) { return nil, worker.Permanent(errFailed) },
	})
	id := strings.TrimSpace(s.ok("submit", "doomed", "-q"))
	if r := s.dtsctl("jobs", "watch", id, "--interval", "50ms"); r.code != command.ExitError {
		t.Fatalf("the job did not die: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	table := s.ok("jobs", "timeline", id)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[0], "AT") {
		t.Fatalf("timeline table:\n%s", table)
	}
	var kinds []string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		kinds = append(kinds, f[1])
		if f[1] == "leased" && (f[3] != "w1" || f[4] == "-") {
			t.Errorf("the lease's row has no worker or token: %q", l)
		}
	}
	if got := strings.Join(kinds, " "); got != "submitted leased failed dead" {
		t.Errorf("kinds = %q, want submitted leased failed dead\n%s", got, table)
	}
	if !strings.Contains(table, "doomed from the start") {
		t.Errorf("the failure's error is missing:\n%s", table)
	}
	got := decode(t, []byte(s.ok("jobs", "timeline", id, "-o", "json")))
	if want := s.api("/jobs/" + id + "/timeline"); !reflect.DeepEqual(got, want) {
		t.Errorf("-o json = %v\nwant the API's %v", got, want)
	}
	if r := s.dtsctl("jobs", "timeline", "999999"); r.code != command.ExitNotFound {
		t.Errorf("unknown job: exit %d, want %d", r.code, command.ExitNotFound)
	}
}
