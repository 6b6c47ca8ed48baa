package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dtsched/dts/cli/command"
	"github.com/dtsched/dts/coordinator"
	"github.com/dtsched/dts/devcluster"
	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/submitter"
	"github.com/dtsched/dts/submitter/app"
	"github.com/dtsched/dts/worker"
)

var update = flag.Bool("update", false, "rewrite the golden files in ../testdata")

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	redistest.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests passed: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// stack is the harness's in-process cluster (devcluster.Stack) with the
// environment dtsctl runs in.
type stack struct {
	h      *devcluster.Stack
	t      *testing.T
	url    string
	dbURL  string
	prefix string
	env    map[string]string
}

func newStack(t *testing.T, configure ...func(*submitter.Config)) *stack {
	t.Helper()
	h := devcluster.New(t, configure...)
	return &stack{h: h, t: t, url: h.URL, dbURL: h.DatabaseURL, prefix: h.RedisPrefix,
		env: map[string]string{"DTSCTL_SERVER": h.URL, "HOME": t.TempDir()}}
}

// run starts a coordinator and a worker w1 with handlers until the test ends.
func (s *stack) run(handlers map[string]worker.HandlerFunc) {
	s.t.Helper()
	s.h.Run(devcluster.Services{Handlers: handlers})
}

// start starts a coordinator, configured by configure when it is not nil,
// and a worker w1 whose handlers register installs, until the test ends;
// it returns the coordinator's HTTP address.
func (s *stack) start(register func(*worker.Worker), configure func(*coordinator.Config)) string {
	s.t.Helper()
	return s.h.Run(devcluster.Services{Register: register, Coordinator: configure})
}

// result is one dtsctl run.
type result struct {
	code           int
	stdout, stderr string
}

// dtsctl runs the CLI in process with the stack's environment.
func (s *stack) dtsctl(args ...string) result {
	s.t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
	defer cancel()
	code := command.Main(ctx, args, command.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return s.env[k] }})
	return result{code, out.String(), errb.String()}
}

// ok runs dtsctl and fails the test unless it exits 0.
func (s *stack) ok(args ...string) string {
	s.t.Helper()
	r := s.dtsctl(args...)
	if r.code != 0 {
		s.t.Fatalf("dtsctl %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// api GETs path from the submitter and returns the body as decoded JSON.
func (s *stack) api(path string) any {
	s.t.Helper()
	resp, err := http.Get(s.url + path)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return decode(s.t, b)
}

func decode(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return v
}

var timestamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)

// golden compares got, timestamps masked, with ../testdata/name.
func golden(t *testing.T, name, got string) {
	t.Helper()
	got = timestamp.ReplaceAllString(got, "<time>")
	path := filepath.Join("..", "testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func TestTablesAndJSON(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	for _, args := range [][]string{
		{"submit", "send_email", "--payload", `{"to":"a@example.com"}`, "--delay", "1h", "-q"},
		{"submit", "report", "--queue", "reports", "--priority", "5", "--delay", "1h", "-q"},
		{"submit", "send_email", "--payload", `"x"`, "--max-retries", "0", "--delay", "1h", "-q"},
	} {
		s.ok(args...)
	}
	golden(t, "jobs_ls.golden", s.ok("jobs", "ls"))
	golden(t, "jobs_get.golden", s.ok("jobs", "get", "2"))
	golden(t, "stats.golden", s.ok("stats"))
	if got := s.ok("jobs", "ls", "-q", "--name", "send_email"); got != "3\n1\n" {
		t.Errorf("jobs ls -q --name send_email = %q", got)
	}

	// -o json is the API's answer, field for field.
	for _, c := range []struct {
		args []string
		path string
	}{
		{[]string{"jobs", "get", "1", "-o", "json"}, "/jobs/1"},
		{[]string{"jobs", "ls", "-o", "json", "--limit", "2"}, "/jobs?limit=2"},
		{[]string{"dlq", "ls", "-o", "json"}, "/dlq?limit=50"},
		{[]string{"workers", "ls", "-o", "json"}, "/workers"},
	} {
		got, want := decode(t, []byte(s.ok(c.args...))), s.api(c.path)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("dtsctl %s:\n%v\nGET %s:\n%v", strings.Join(c.args, " "), got, c.path, want)
		}
	}
	stats := decode(t, []byte(s.ok("stats", "-o", "json"))).(map[string]any)
	want := s.api("/stats").(map[string]any)
	delete(stats, "oldest_pending_seconds")
	delete(want, "oldest_pending_seconds")
	if !reflect.DeepEqual(stats, want) {
		t.Errorf("stats -o json = %v, API %v", stats, want)
	}
	// jsonl: one job per line.
	lines := strings.Split(strings.TrimSpace(s.ok("jobs", "ls", "-o", "jsonl")), "\n")
	if len(lines) != 3 || decode(t, []byte(lines[0])).(map[string]any)["job_id"] != "3" {
		t.Errorf("jobs ls -o jsonl = %q", lines)
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	s := newStack(t, func(c *submitter.Config) { c.Auth = auth.Config{APIKeys: true} })
	ta, err := app.OpenTokenAdmin(t.Context(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer ta.Close()
	admin, err := ta.Create(t.Context(), "cli:test", "ops", []string{"admin"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := ta.Create(t.Context(), "cli:test", "ro", []string{"read"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		token string
		args  []string
		want  int
	}{
		{"", []string{"stats"}, command.ExitAuth},
		{"dts_nonsense", []string{"stats"}, command.ExitAuth},
		{reader.Key, []string{"stats"}, command.ExitOK},
		{reader.Key, []string{"jobs", "cancel", "1"}, command.ExitAuth}, // forbidden: needs admin
		{admin.Key, []string{"jobs", "get", "999"}, command.ExitNotFound},
		{admin.Key, []string{"workers", "get", "nobody"}, command.ExitNotFound},
		{admin.Key, []string{"token", "revoke", "999"}, command.ExitNotFound},
		{admin.Key, []string{"jobs", "get", "abc"}, command.ExitError}, // 400 invalid_id
		{admin.Key, []string{"jobs", "ls", "--bogus"}, command.ExitUsage},
		{admin.Key, []string{"jobs", "frobnicate"}, command.ExitUsage},
		{admin.Key, []string{"jobs", "get"}, command.ExitUsage},
		{admin.Key, []string{"stats", "-o", "yaml"}, command.ExitUsage},
		{admin.Key, []string{"jobs", "cancel", "--all"}, command.ExitUsage}, // neither --yes nor --dry-run
		{admin.Key, []string{"jobs", "cancel", "--dry-run"}, command.ExitUsage},
		{admin.Key, []string{"submit", "x", "--payload", "not json"}, command.ExitUsage},
	} {
		s.env["DTSCTL_TOKEN"] = c.token
		if r := s.dtsctl(c.args...); r.code != c.want {
			t.Errorf("dtsctl %s (token %.6s): exit %d, want %d\n%s", strings.Join(c.args, " "), c.token, r.code, c.want, r.stderr)
		}
	}

	// A profile from the config file supplies server and token.
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte("current-profile: ops\nprofiles:\n  ops:\n    server: "+s.url+"\n    token: "+admin.Key+"\n"), 0o600)
	s.env = map[string]string{"DTSCTL_CONFIG": cfg}
	if r := s.dtsctl("token", "list", "-q"); r.code != 0 || r.stdout != reader.ID+"\n"+admin.ID+"\n" {
		t.Errorf("token list through the profile: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := s.dtsctl("--profile", "missing", "stats"); r.code != command.ExitUsage {
		t.Errorf("unknown profile: exit %d", r.code)
	}
	key := strings.TrimSpace(s.ok("token", "create", "--name", "ci", "--scope", "submit,read", "--ttl", "24h", "-q"))
	if !strings.HasPrefix(key, "dts_") {
		t.Errorf("token create -q = %q, want the key", key)
	}
}

func TestBulkAndDryRun(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	for range 5 {
		s.ok("submit", "a", "--delay", "1h")
	}
	for range 2 {
		s.ok("submit", "b", "--delay", "1h")
	}
	if got := s.ok("jobs", "cancel", "--name", "a", "--dry-run"); got != "5\n" {
		t.Errorf("cancel --name a --dry-run = %q, want 5", got)
	}
	if got := s.ok("jobs", "cancel", "--status", "pending", "--dry-run"); got != "7\n" {
		t.Errorf("cancel --status pending --dry-run = %q, want 7", got)
	}
	if got := s.ok("jobs", "cancel", "--name", "a", "--yes"); got != "cancel: 5 of 5 jobs\n" {
		t.Errorf("cancel --name a --yes = %q", got)
	}
	if got := s.ok("jobs", "ls", "--status", "canceled", "-q"); got != "5\n4\n3\n2\n1\n" {
		t.Errorf("canceled jobs: %q", got)
	}
	if got := s.ok("jobs", "cancel", "6"); got != "6 canceled\n" {
		t.Errorf("cancel 6 = %q", got)
	}
	if r := s.dtsctl("jobs", "delete", "7"); r.code != command.ExitError || !strings.Contains(r.stderr, "conflict") {
		t.Errorf("delete a pending job: exit %d %s", r.code, r.stderr)
	}
	if got := s.ok("jobs", "delete", "6"); got != "6 deleted\n" {
		t.Errorf("delete 6 = %q", got)
	}
	if got := s.ok("jobs", "delete", "--all", "--dry-run"); got != "5\n" {
		t.Errorf("delete --all --dry-run = %q, want the 5 canceled", got)
	}
	var res map[string]any
	json.Unmarshal([]byte(s.ok("jobs", "delete", "--status", "canceled", "--yes", "-o", "json")), &res)
	if res["matched"] != 5.0 || res["affected"] != 5.0 || res["dry_run"] != false {
		t.Errorf("delete --yes -o json = %v", res)
	}
	if got := s.ok("dlq", "purge", "--dry-run"); got != "0\n" {
		t.Errorf("dlq purge --dry-run = %q", got)
	}
	if r := s.dtsctl("jobs", "requeue", "--status", "pending", "--yes"); r.code != command.ExitError || !strings.Contains(r.stderr, "invalid_field") {
		t.Errorf("requeue pending jobs: exit %d %s", r.code, r.stderr)
	}
	audit := s.ok("audit", "ls", "-o", "jsonl")
	for _, want := range []string{`"action":"job.bulk","target_type":"job","target_id":"cancel"`, `"action":"job.delete"`, `"target_id":"delete"`} {
		if !strings.Contains(audit, want) {
			t.Errorf("audit log lacks %s:\n%s", want, audit)
		}
	}
}

func TestWorkersAndDLQ(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.run(map[string]worker.HandlerFunc{
		"doomed": func(ctx context.Context, j *worker.Job) (any, error) { return nil, worker.Permanent(errFailed) },
		"echo":   func(ctx context.Context, j *worker.Job) (any, error) { return j.PayloadString(), nil },
	})
	if r := s.dtsctl("submit", "echo", "--payload", `"hi"`, "--wait", "-o", "json"); r.code != 0 ||
		decode(t, []byte(r.stdout)).(map[string]any)["result"] != "hi" {
		t.Errorf("submit --wait: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	id := strings.TrimSpace(s.ok("submit", "doomed", "-q"))
	if r := s.dtsctl("jobs", "watch", id, "--interval", "50ms"); r.code != command.ExitError || !strings.Contains(r.stdout, "failed") {
		t.Errorf("watch of a failing job: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := s.ok("dlq", "ls", "-q"); got != id+"\n" {
		t.Errorf("dlq ls -q = %q, want %s", got, id)
	}
	if got := s.ok("dlq", "requeue", "--dry-run"); got != "1\n" {
		t.Errorf("dlq requeue --dry-run = %q", got)
	}
	// The leader records the fleet once a heartbeat interval, which a
	// loaded machine can delay past the jobs above.
	testwait.For(t, 10*time.Second, "w1 recorded", func() bool { return s.dtsctl("workers", "ls", "-q").stdout == "w1\n" })
	var w map[string]any
	json.Unmarshal([]byte(s.ok("workers", "get", "w1", "-o", "json")), &w)
	if w["worker_id"] != "w1" || w["concurrency"] != 8.0 {
		t.Errorf("workers get w1 = %v", w)
	}
}

type failedError struct{}

func (failedError) Error() string { return "doomed from the start" }

var errFailed = failedError{}

// The queue commands over the real routes: pause, cap, list (table and
// JSON), resume; each change lands in the queues table.
func TestQueues(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	if r := s.dtsctl("submit", "report", "--queue", "reports", "-q"); r.code != 0 {
		t.Fatalf("submit: exit %d %s", r.code, r.stderr)
	}
	if got := s.ok("queues", "pause", "reports"); got != "reports paused\n" {
		t.Errorf("pause = %q", got)
	}
	if got := s.ok("queues", "cap", "reports", "3"); got != "reports capped at 3\n" {
		t.Errorf("cap = %q", got)
	}
	table := s.ok("queues", "ls")
	if !regexp.MustCompile(`(?m)^reports\s+true\s+3\s+1\s+1\s`).MatchString(table) {
		t.Errorf("queues ls =\n%s", table)
	}
	// The columns are the API's fields, in its words: one vocabulary.
	header := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(strings.SplitN(table, "\n", 2)[0]), -1)
	var fields []string
	for f := range s.api("/queues").(map[string]any)["queues"].([]any)[0].(map[string]any) {
		fields = append(fields, f)
	}
	for i, h := range header {
		header[i] = strings.ReplaceAll(strings.ToLower(h), " ", "_")
	}
	slices.Sort(header)
	slices.Sort(fields)
	if !slices.Equal(header, fields) {
		t.Errorf("queues ls columns %v, GET /queues fields %v", header, fields)
	}
	if got := s.ok("queues", "resume", "reports"); got != "reports resumed\n" {
		t.Errorf("resume = %q", got)
	}
	js := s.ok("queues", "ls", "-o", "json")
	if !strings.Contains(js, `"name": "reports"`) || !strings.Contains(js, `"paused": false`) || !strings.Contains(js, `"concurrency": 3`) {
		t.Errorf("queues ls -o json = %s", js)
	}
	if r := s.dtsctl("queues", "cap", "reports", "-1"); r.code != command.ExitUsage {
		t.Errorf("cap -1: exit %d %s; want a usage error", r.code, r.stderr)
	}
	if r := s.dtsctl("queues", "pause", "bad name"); r.code != command.ExitError || !strings.Contains(r.stderr, "invalid_field") {
		t.Errorf("pause of a bad name: exit %d %s", r.code, r.stderr)
	}
}

// The limit commands over the real routes: set (a concurrency key and a
// name limit), submit under a key, list (table and JSON), remove; a bad
// limit is the server's invalid_limit.
func TestLimits(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	if got := s.ok("limits", "set", "tenant-7", "--concurrency", "5"); got != "tenant-7 limited: concurrency 5, rate 0 per 0s\n" {
		t.Errorf("set = %q", got)
	}
	if got := s.ok("limits", "set", "name:send_email", "--rate", "100", "--period", "1m"); got != "name:send_email limited: concurrency 0, rate 100 per 1m0s\n" {
		t.Errorf("set a name limit = %q", got)
	}
	if r := s.dtsctl("submit", "report", "--concurrency-key", "tenant-7", "-q"); r.code != 0 {
		t.Fatalf("submit: exit %d %s", r.code, r.stderr)
	}
	table := s.ok("limits", "ls")
	if !strings.Contains(table, "CONCURRENCY") || !regexp.MustCompile(`(?m)^tenant-7\s+5\s+0\s+0s\s+0\s+1\s*$`).MatchString(table) ||
		!regexp.MustCompile(`(?m)^name:send_email\s+0\s+100\s+1m0s\s+0\s+0\s*$`).MatchString(table) {
		t.Errorf("limits ls =\n%s", table)
	}
	js := s.ok("limits", "ls", "-o", "json")
	if !strings.Contains(js, `"key": "tenant-7"`) || !strings.Contains(js, `"waiting": 1`) {
		t.Errorf("limits ls -o json = %s", js)
	}
	if got := s.ok("limits", "rm", "tenant-7"); got != "tenant-7 unlimited\n" {
		t.Errorf("rm = %q", got)
	}
	if r := s.dtsctl("limits", "rm", "tenant-7"); r.code != command.ExitNotFound || !strings.Contains(r.stderr, "not_found") {
		t.Errorf("second rm: exit %d %s", r.code, r.stderr)
	}
	if r := s.dtsctl("limits", "set", "k", "--rate", "5"); r.code != command.ExitError || !strings.Contains(r.stderr, "invalid_limit") {
		t.Errorf("a rate without a period: exit %d %s", r.code, r.stderr)
	}
}
