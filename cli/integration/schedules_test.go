package integration_test

import (
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/dtsched/dts/cli/command"
)

// The schedule commands over the real routes: create (its template lands
// as given), list and get (tables, and -o json as the API answers), pause
// and resume, trigger (a job now, -q its id), delete; bad input is the
// server's or a usage error.
func TestSchedules(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	id := strings.TrimSpace(s.ok("schedules", "create", "nightly", "--cron", "0 3 * * *", "--time-zone", "Europe/Paris",
		"--job", "report", "--payload", `{"kind":"daily"}`, "--queue", "reports", "--priority", "5", "--max-retries", "1",
		"--timeout", "90s", "-q"))
	if id != "1" {
		t.Fatalf("create -q = %q, want 1", id)
	}
	s.ok("schedules", "create", "tick", "--cron", "@hourly", "--job", "noop", "--overlap", "allow", "--catch-up", "none")
	golden(t, "schedules_ls.golden", s.ok("schedules", "ls"))
	golden(t, "schedules_get.golden", s.ok("schedules", "get", id))
	for _, c := range []struct {
		args []string
		path string
	}{
		{[]string{"schedules", "get", id, "-o", "json"}, "/schedules/1"},
		{[]string{"schedules", "ls", "-o", "json"}, "/schedules"},
	} {
		got, want := decode(t, []byte(s.ok(c.args...))), s.api(c.path)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("dtsctl %s:\n%v\nGET %s:\n%v", strings.Join(c.args, " "), got, c.path, want)
		}
	}
	if got := s.ok("schedules", "ls", "-q", "--limit", "1", "--all"); got != "2\n1\n" {
		t.Errorf("ls -q --limit 1 --all = %q", got)
	}

	if got := s.ok("schedules", "pause", id); got != "1 nightly paused, next fire at -\n" {
		t.Errorf("pause = %q", got)
	}
	if got := s.ok("schedules", "get", id, "-o", "json"); !strings.Contains(got, `"paused": true`) || !strings.Contains(got, `"next_fire_at": null`) {
		t.Errorf("paused schedule = %s", got)
	}
	if got := s.ok("schedules", "resume", id); !regexp.MustCompile(`^1 nightly resumed, next fire at \d{4}-`).MatchString(got) {
		t.Errorf("resume = %q", got)
	}

	job := strings.TrimSpace(s.ok("schedules", "trigger", id, "-q"))
	j := decode(t, []byte(s.ok("jobs", "get", job, "-o", "json"))).(map[string]any)
	if j["name"] != "report" || j["queue"] != "reports" || j["priority"] != 5.0 || j["max_retries"] != 1.0 ||
		!reflect.DeepEqual(j["payload"], map[string]any{"kind": "daily"}) {
		t.Errorf("triggered job %s = %v", job, j)
	}

	if got := s.ok("schedules", "delete", "2"); got != "2 tick deleted\n" {
		t.Errorf("delete = %q", got)
	}
	if got := s.ok("schedules", "ls", "-q"); got != "1\n" {
		t.Errorf("ls after delete = %q", got)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"schedules", "get", "2"}, command.ExitNotFound, "not_found"},
		{[]string{"schedules", "trigger", "2"}, command.ExitNotFound, "not_found"},
		{[]string{"schedules", "create", "nightly", "--cron", "@daily", "--job", "x"}, command.ExitError, "conflict"},
		{[]string{"schedules", "create", "bad", "--cron", "61 * * * *", "--job", "x"}, command.ExitError, "invalid_field"},
		{[]string{"schedules", "create", "nocron", "--job", "x"}, command.ExitUsage, `"cron" not set`},
		{[]string{"schedules", "create", "badjson", "--cron", "@daily", "--job", "x", "--payload", "{"}, command.ExitUsage, "not JSON"},
	} {
		if r := s.dtsctl(c.args...); r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("dtsctl %s: exit %d %s; want %d and %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.want)
		}
	}
}

// dtsctl version prints its own build, needs no server and takes -o json.
func TestVersion(t *testing.T) {
	t.Parallel()
	s := &stack{t: t, env: map[string]string{"DTSCTL_SERVER": "http://127.0.0.1:1", "DTSCTL_CONFIG": "/nonexistent/config.yaml"}}
	table := s.ok("version")
	for _, want := range []string{"VERSION:", "REVISION:", "GO:", runtime.Version()} {
		if !strings.Contains(table, want) {
			t.Errorf("version lacks %q:\n%s", want, table)
		}
	}
	v := decode(t, []byte(s.ok("version", "-o", "json"))).(map[string]any)
	if v["go"] != runtime.Version() || v["module"] == "" {
		t.Errorf("version -o json = %v", v)
	}
	if r := s.dtsctl("version", "-o", "yaml"); r.code != command.ExitUsage {
		t.Errorf("version -o yaml: exit %d", r.code)
	}
}
