package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/devcluster/process"
	"github.com/dtsched/dts/internal/testwait"
)

// TestObservability runs a small cluster (a coordinator, a submitter, two
// workers) scraped every second by a real Prometheus that also evaluates
// deploy/prometheus/alerts.yml. After a mixed workload (successes of every
// built-in type, failures into the DLQ, a timeout, a cancel, a worker
// SIGKILLed under a lease, bad requests) it runs every PromQL expression of
// every shipped Grafana dashboard and fails if one errors or returns no
// data, then checks the alert expressions evaluate and the key counters
// count what happened.
func TestObservability(t *testing.T) {
	t.Parallel()
	promBin := findPrometheus(t)
	root := repoRoot(t)

	// Heartbeats slower than fastEnv's: this test runs longest, beside
	// the others under -race on few cores, and a live worker declared dead
	// (its job taken away) would muddle the counts.
	c := newCluster(t, "HEARTBEAT_INTERVAL=500ms", "HEARTBEAT_MISSES=4")
	coord := c.startCoordinator("c1")
	sub := c.startSubmitter()
	workers := map[string]*proc{
		"w1": c.startWorker("w1", "WORKER_CONCURRENCY=4"),
		"w2": c.startWorker("w2", "WORKER_CONCURRENCY=4"),
	}
	p := startPrometheus(t, promBin, root, c.logDir, map[string][]string{
		"submitter":   {hostPort(sub.url)},
		"coordinator": {hostPort(coord.url)},
		"worker":      {hostPort(workers["w1"].url), hostPort(workers["w2"].url)},
	})
	// Every target scraped once before the workload, so counters have a
	// sample before they grow and rate() sees the growth.
	p.eventually(t, 20*time.Second, "every target up", func() (bool, string) {
		return p.targetsUp(t, 4)
	})

	// Phase 1: successes of every built-in type, failures into the DLQ
	// (max_retries 1: two attempts each), bad requests; then a timeout.
	// Twice: a series is born holding its first increment, which rate()
	// cannot see, so the first round creates every per-type and per-route
	// series and Prometheus scrapes them before the second one counts.
	var succeed, fail []string
	round := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			for _, name := range []string{"noop", "cpu_intensive", "io_intensive", "mixed_workload"} {
				succeed = append(succeed, c.submit(map[string]any{"name": name, "payload": fmt.Sprintf("x%d", i)}))
			}
			succeed = append(succeed, c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 0.2}}))
			fail = append(fail, c.submit(map[string]any{"name": "test_job", "payload": fmt.Sprintf("invalid_job_%d", len(fail)), "max_retries": 1}))
		}
		for _, r := range badRequests {
			if code, out := c.do(r.method, c.submitter+r.path, r.body); code < 400 || code >= 500 {
				t.Fatalf("%s %s = %d %v, want a 4xx", r.method, r.path, code, out)
			}
		}
		for _, id := range succeed {
			c.waitStatus(id, "completed", 30*time.Second)
		}
		for _, id := range fail {
			if j := c.waitStatus(id, "failed", 30*time.Second); j["attempts"].(float64) != 2 {
				t.Fatalf("failing job %s: attempts %v, want 2 (max_retries 1)", id, j["attempts"])
			}
		}
	}
	round(1)
	p.eventually(t, 15*time.Second, "Prometheus to scrape the first round", func() (bool, string) {
		v, ok := p.scalar(t, `sum(dts_attempts_finished_total) + sum(jobs_total{status="completed"})`)
		want := float64(2*len(succeed) + 2*len(fail))
		return ok && v >= want, fmt.Sprintf("got %v, want %v", v, want)
	})
	round(3)
	timeout := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 3}, "timeout_seconds": 1, "max_retries": 0})
	j := c.waitStatus(timeout, "failed", 30*time.Second)
	if errs, _ := j["errors"].([]any); len(errs) != 1 || errs[0].(map[string]any)["reason"] != "timeout" {
		t.Fatalf("timeout job: errors %v, want one timeout", j["errors"])
	}

	// Phase 2: cancel a running job.
	canceled := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 30}})
	c.waitStatus(canceled, "leased", 10*time.Second)
	if code, out := c.do("POST", c.submitter+"/jobs/"+canceled+"/cancel", nil); code != http.StatusAccepted {
		t.Fatalf("cancel running job = %d %v, want 202", code, out)
	}
	c.waitStatus(canceled, "canceled", 10*time.Second)

	// Phase 3: SIGKILL the worker holding a job; it is reclaimed
	// (worker_failure) and runs on the other one.
	held := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 2}})
	j = c.waitStatus(held, "leased", 10*time.Second)
	victim, _ := j["worker_id"].(string)
	if workers[victim] == nil {
		t.Fatalf("held job leased to %q, want w1 or w2", victim)
	}
	workers[victim].kill(t)
	j = c.waitStatus(held, "completed", 30*time.Second)
	if j["worker_id"] == victim || j["attempts"].(float64) < 2 {
		t.Fatalf("held job after the kill: worker %v attempts %v, want the other worker and 2 attempts or more", j["worker_id"], j["attempts"])
	}
	if n := c.metric(coord.url, "workers_active", `state="unavailable"`); n < 1 {
		t.Fatalf(`coordinator workers_active{state="unavailable"} = %v after the kill, want >= 1`, n)
	}

	// What happened, as Prometheus saw it. Polled: the last changes show up
	// at the next scrape.
	dead := float64(len(fail) + 1)
	for _, a := range []struct {
		expr string
		ok   func(float64) bool
		want string
	}{
		{`sum(jobs_total{status="completed"})`, func(v float64) bool { return v >= float64(len(succeed)+1) }, fmt.Sprintf(">= %d", len(succeed)+1)},
		{`sum(jobs_total{status="failed"})`, func(v float64) bool { return v >= dead }, fmt.Sprintf(">= %v", dead)},
		{`sum(jobs_total{status="timeout"})`, func(v float64) bool { return v >= 1 }, ">= 1"},
		{`sum(job_processing_duration_seconds_count)`, func(v float64) bool { return v > 0 }, "> 0"},
		{`sum(dts_reclaimed_total{reason="worker_failure"})`, func(v float64) bool { return v >= 1 }, ">= 1"},
		{`max(workers_active{state="unavailable"})`, func(v float64) bool { return v >= 1 }, ">= 1"},
		{`max(jobs_in_dlq)`, func(v float64) bool { return v >= dead }, fmt.Sprintf(">= %v", dead)},
		{`sum(dts_attempts_finished_total{outcome="failed"})`, func(v float64) bool { return v >= 2*float64(len(fail))+2 }, fmt.Sprintf(">= %d", 2*len(fail)+2)},
		{`sum(dts_dead_lettered_total)`, func(v float64) bool { return v >= dead }, fmt.Sprintf(">= %v", dead)},
		{`sum(job_retry_attempts_count)`, func(v float64) bool { return v > 0 }, "> 0"},
		{`sum(http_requests_total{job="submitter", code=~"4.."})`, func(v float64) bool { return v >= float64(2*len(badRequests)) }, fmt.Sprintf(">= %d", 2*len(badRequests))},
		{`sum(dts_jobs_submitted_total)`, func(v float64) bool { return v >= float64(len(succeed)+len(fail)+3) }, fmt.Sprintf(">= %d", len(succeed)+len(fail)+3)},
		// Every job type's series existed before the second round, so
		// the per-type panels show real rates, not zeros.
		{`count(sum by (name) (rate(dts_attempts_started_total[5m])) > 0)`, func(v float64) bool { return v >= 6 }, ">= 6 (5 built-in types and other)"},
		{`count(sum by (name) (rate(dts_attempts_finished_total{outcome="succeeded"}[5m])) > 0)`, func(v float64) bool { return v >= 5 }, ">= 5"},
		{`count(up{job="worker"} == 0)`, func(v float64) bool { return v == 1 }, "== 1 (the killed worker)"},
		{`sum(dts_coordinator_leader)`, func(v float64) bool { return v == 1 }, "== 1"},
	} {
		p.eventually(t, 15*time.Second, a.expr+" "+a.want, func() (bool, string) {
			v, ok := p.scalar(t, a.expr)
			return ok && a.ok(v), fmt.Sprintf("got %v (data: %v)", v, ok)
		})
	}
	// The worker-down rule saw the kill (it fires after 1m; pending is
	// enough to show the rule file is loaded and evaluated).
	p.eventually(t, 15*time.Second, "DTSWorkerDown pending or firing", func() (bool, string) {
		alerts := p.alerts(t)
		return alerts["DTSWorkerDown"] != "", fmt.Sprintf("alerts: %v", alerts)
	})
	if alerts := p.alerts(t); alerts["DTSNoLeader"] != "" {
		t.Errorf("DTSNoLeader is %s while c1 leads: %v", alerts["DTSNoLeader"], alerts)
	}
	// Three more scrapes of every target (one a second), so that every
	// rate() has samples on both sides of the workload's last changes.
	since := float64(time.Now().UnixMilli()) / 1000
	p.eventually(t, 15*time.Second, "three more scrapes of every target", func() (bool, string) {
		v, ok := p.scalar(t, "min(timestamp(up))")
		return ok && v > since+2, fmt.Sprintf("the least recent scrape at %.3f, want after %.3f", v, since+2)
	})

	t.Run("dashboards", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join(root, "deploy", "grafana", "dashboards", "*.json"))
		more, _ := filepath.Glob(filepath.Join(root, "deploy", "grafana", "provisioning", "dashboards", "*.json"))
		files = append(files, more...)
		if len(files) == 0 {
			t.Fatal("no dashboards in deploy/grafana/dashboards")
		}
		n := 0
		for _, f := range files {
			d := readDashboard(t, f)
			for _, pn := range allPanels(d.Panels) {
				for _, tg := range pn.Targets {
					if strings.TrimSpace(tg.Expr) == "" {
						continue
					}
					n++
					where := fmt.Sprintf("%s panel %q (id %d) target %s", filepath.Base(f), pn.Title, pn.ID, tg.RefID)
					expr, err := grafanaExpr(tg.Expr)
					if err != nil {
						t.Errorf("%s: %v", where, err)
						continue
					}
					// Polled, not read once: the gauges the coordinators
					// read from PostgreSQL at scrape time drop out of a
					// scrape that outlasts its 900 ms on a loaded machine,
					// and come back at the next.
					var res []promSample
					err = testwait.Until(t, 15*time.Second, func() error {
						var qerr error
						res, qerr = p.query(expr)
						switch {
						case qerr != nil:
							return testwait.GiveUp(qerr)
						case len(res) == 0:
							return errors.New("no data")
						case allNaN(res):
							return fmt.Errorf("only NaN (no number to show): %v", res)
						}
						return nil
					})
					if err != nil {
						t.Errorf("%s: %v\n  expr: %s", where, err, expr)
						continue
					}
					t.Logf("%s: %v", where, res)
				}
			}
		}
		t.Logf("%d dashboard expressions return data", n)
	})

	t.Run("alert expressions", func(t *testing.T) {
		exprs := ruleExprs(readFile(t, filepath.Join(root, "deploy", "prometheus", "alerts.yml")))
		if len(exprs) == 0 {
			t.Fatal("no expr in deploy/prometheus/alerts.yml")
		}
		for _, e := range exprs {
			res, err := p.query(e)
			if err != nil {
				t.Errorf("alert expr does not evaluate: %v\n  expr: %s", err, e)
				continue
			}
			t.Logf("alert expr %q: %v", strings.Join(strings.Fields(e), " "), res)
		}
		// The rules as Prometheus loaded and evaluated them: all of them,
		// none with an evaluation error.
		rules := p.rules(t)
		if len(rules) != len(exprs) {
			t.Errorf("Prometheus loaded %d alerting rules, alerts.yml has %d exprs: %v", len(rules), len(exprs), rules)
		}
		for name, health := range rules {
			if health != "ok" {
				t.Errorf("rule %s: health %q", name, health)
			}
		}
	})
}

// badRequests are answered with a 4xx.
var badRequests = []struct {
	method, path string
	body         any
}{
	{"POST", "/submit_job", map[string]any{"payload": "no name"}},
	{"POST", "/submit_job", map[string]any{"name": "noop", "max_retries": -1}},
	{"GET", "/jobs/999999", nil},
	{"GET", "/jobs/not-a-number", nil},
	{"POST", "/dlq/999999/requeue", nil},
	{"GET", "/no/such/route", nil},
}

// findPrometheus finds the prometheus binary or fails: without it the
// dashboards go untested, which must not pass silently.
func findPrometheus(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMETHEUS"); p != "" {
		return p
	}
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/prometheus"); err == nil {
		return "/usr/bin/prometheus"
	}
	t.Fatal("prometheus not found (not on PATH, not /usr/bin/prometheus): install it (Debian/Ubuntu: apt-get install prometheus; " +
		"or a release from https://prometheus.io/download/) or set PROMETHEUS to its path; " +
		"the dashboards' queries cannot be checked without it")
	return ""
}

func hostPort(u string) string { return strings.TrimPrefix(u, "http://") }

// promServer is a Prometheus started for one test.
type promServer struct {
	url string
	p   *process.Process
}

// exited says how Prometheus ended, or "" while it runs.
func (p *promServer) exited() string {
	if p.p.Running() {
		return ""
	}
	return fmt.Sprintf("prometheus exited (%v):\n%s", p.p.Cmd.ProcessState, p.p.Tail(40))
}

// startPrometheus runs Prometheus on a free port with a configuration that
// scrapes targets (job name to host:port list) every second and evaluates
// deploy/prometheus/alerts.yml every second. It is killed at cleanup; its
// log is shown if the test failed.
func startPrometheus(t *testing.T, bin, root, logDir string, targets map[string][]string) *promServer {
	t.Helper()
	dir := t.TempDir()
	addr := freeAddr(t)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n")
	fmt.Fprintf(&cfg, "rule_files:\n  - %q\n", filepath.Join(root, "deploy", "prometheus", "alerts.yml"))
	fmt.Fprintf(&cfg, "scrape_configs:\n")
	jobs := make([]string, 0, len(targets))
	for job := range targets {
		jobs = append(jobs, job)
	}
	sort.Strings(jobs)
	targets["prometheus"] = []string{addr}
	for _, job := range append(jobs, "prometheus") {
		quoted := make([]string, len(targets[job]))
		for i, tg := range targets[job] {
			quoted[i] = strconv.Quote(tg)
		}
		fmt.Fprintf(&cfg, "  - job_name: %s\n    static_configs:\n      - targets: [%s]\n", job, strings.Join(quoted, ", "))
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &process.Group{LogDir: logDir}
	proc := process.MustStart(t, g, process.Spec{Name: "prometheus", Path: bin, Args: []string{"--config.file=" + cfgPath,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + addr}})
	t.Cleanup(func() {
		g.Kill()
		if t.Failed() {
			t.Logf("---- prometheus config ----\n%s\n---- prometheus log (tail) ----\n%s", cfg.String(), proc.Tail(40))
		}
	})
	p := &promServer{url: "http://" + addr, p: proc}
	if err := testwait.Until(t, 30*time.Second, func() error {
		if !proc.Running() {
			t.Fatalf("prometheus exited during start-up:\n%s", proc.Tail(40))
		}
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	}); err != nil {
		t.Fatalf("prometheus not ready after 30s (%v):\n%s", err, proc.Tail(40))
	}
	return p
}

// eventually polls cond until it holds; on time-out it fails with what
// cond last said.
func (p *promServer) eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testwait.NoError(t, timeout, what, func() error {
		if ok, last := cond(); !ok {
			return errors.New(last)
		}
		return nil
	})
}

// api GETs a Prometheus HTTP API path and decodes its data.
func (p *promServer) api(path string, params url.Values, data any) error {
	resp, err := http.Get(p.url + path + "?" + params.Encode())
	if err != nil {
		if ex := p.exited(); ex != "" {
			return fmt.Errorf("%w; %s", err, ex)
		}
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%s: HTTP %d, not JSON: %q", path, resp.StatusCode, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

// promSample is one element of an instant query's answer.
type promSample struct {
	Metric map[string]string
	Value  float64
}

func (s promSample) String() string {
	var ls []string
	for k, v := range s.Metric {
		ls = append(ls, k+"="+strconv.Quote(v))
	}
	sort.Strings(ls)
	return fmt.Sprintf("{%s} %g", strings.Join(ls, ","), s.Value)
}

// query runs an instant query at the current time.
func (p *promServer) query(expr string) ([]promSample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	parse := func(v [2]any) (float64, error) {
		s, _ := v[1].(string)
		return strconv.ParseFloat(s, 64)
	}
	switch data.ResultType {
	case "vector":
		var rs []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &rs); err != nil {
			return nil, err
		}
		out := make([]promSample, 0, len(rs))
		for _, r := range rs {
			v, err := parse(r.Value)
			if err != nil {
				return nil, fmt.Errorf("value %v: %w", r.Value, err)
			}
			out = append(out, promSample{Metric: r.Metric, Value: v})
		}
		return out, nil
	case "scalar":
		var r [2]any
		if err := json.Unmarshal(data.Result, &r); err != nil {
			return nil, err
		}
		v, err := parse(r)
		if err != nil {
			return nil, err
		}
		return []promSample{{Value: v}}, nil
	}
	return nil, fmt.Errorf("result type %q, want an instant vector or scalar", data.ResultType)
}

// scalar runs expr, which must aggregate to at most one sample; ok is false
// when it has none (or the query failed).
func (p *promServer) scalar(t *testing.T, expr string) (float64, bool) {
	t.Helper()
	res, err := p.query(expr)
	if err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	if len(res) > 1 {
		t.Fatalf("query %s: %d samples, want one: %v", expr, len(res), res)
	}
	if len(res) == 0 {
		return 0, false
	}
	return res[0].Value, true
}

// targetsUp reports whether want targets are up, each scraped at least once.
func (p *promServer) targetsUp(t *testing.T, want int) (bool, string) {
	var data struct {
		ActiveTargets []struct {
			ScrapePool string `json:"scrapePool"`
			ScrapeURL  string `json:"scrapeUrl"`
			Health     string `json:"health"`
			LastError  string `json:"lastError"`
		} `json:"activeTargets"`
	}
	if err := p.api("/api/v1/targets", url.Values{"state": {"active"}}, &data); err != nil {
		t.Fatal(err)
	}
	up := 0
	var states []string
	for _, tg := range data.ActiveTargets {
		if tg.ScrapePool == "prometheus" {
			continue
		}
		if tg.Health == "up" {
			up++
		}
		states = append(states, fmt.Sprintf("%s %s %s %s", tg.ScrapePool, tg.ScrapeURL, tg.Health, tg.LastError))
	}
	return up == want, strings.Join(states, "; ")
}

// alerts maps each active alert's name to its state (pending, firing).
func (p *promServer) alerts(t *testing.T) map[string]string {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.api("/api/v1/alerts", nil, &data); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, a := range data.Alerts {
		out[a.Labels["alertname"]] = a.State
	}
	return out
}

// rules maps each loaded alerting rule to its health (ok, err, unknown),
// with its last error if any.
func (p *promServer) rules(t *testing.T) map[string]string {
	var data struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.api("/api/v1/rules", url.Values{"type": {"alert"}}, &data); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			out[r.Name] = r.Health
			if r.LastError != "" {
				out[r.Name] += ": " + r.LastError
			}
		}
	}
	return out
}

func allNaN(res []promSample) bool {
	for _, s := range res {
		if !math.IsNaN(s.Value) {
			return false
		}
	}
	return true
}

// grafanaVars are the values given to Grafana's global variables: a 15
// minute dashboard (its default time range) at Grafana's default step for
// a 1 s scrape interval. $__range is 5m here: the test's Prometheus has
// not run longer.
var grafanaVars = map[string]string{
	"__range":         "5m",
	"__range_s":       "300",
	"__range_ms":      "300000",
	"__rate_interval": "1m",
	"__interval":      "15s",
	"__interval_ms":   "15000",
}

var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// grafanaExpr substitutes Grafana's variables in a panel's expr. A variable
// it does not know (a dashboard template variable) is an error: the test
// would need a value for it.
func grafanaExpr(expr string) (string, error) {
	var unknown []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		sm := grafanaVar.FindStringSubmatch(m)
		name := sm[1] + sm[2] + sm[3]
		if v, ok := grafanaVars[name]; ok {
			return v
		}
		unknown = append(unknown, m)
		return m
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown Grafana variable(s) %v in %q: give them a value in grafanaVars", unknown, expr)
	}
	return out, nil
}
