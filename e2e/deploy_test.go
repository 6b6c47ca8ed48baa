package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDeploy checks deploy/ without running anything: the Prometheus
// configuration and alert rules (with promtool, including the rules' unit
// tests), the Grafana dashboards and provisioning, docker-compose.yml and
// the Dockerfiles. It also checks that every metric a dashboard or an alert
// queries is defined somewhere in the Go sources, so renaming a metric
// breaks this test rather than a panel.
func TestDeploy(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	deploy := filepath.Join(root, "deploy")

	t.Run("promtool", func(t *testing.T) {
		promtool := findPromtool(t)
		dir := filepath.Join(deploy, "prometheus")
		for _, args := range [][]string{
			{"check", "config", "prometheus.yml"},
			{"check", "rules", "alerts.yml"},
			{"test", "rules", "alerts_test.yml"},
		} {
			cmd := exec.Command(promtool, args...)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("promtool %s (in deploy/prometheus): %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	})

	t.Run("prometheus targets", func(t *testing.T) {
		// deploy/local/cluster.sh rewrites these host:port pairs for `make
		// up`; docker compose resolves them as service names.
		cfg := readFile(t, filepath.Join(deploy, "prometheus", "prometheus.yml"))
		for _, want := range []string{"submitter:8000", "coordinator:9000", "worker-1:7001", "worker-2:7002",
			"worker-3:7003", "prometheus:9090", "job_name: worker", "alerts.yml", "dns_sd_configs"} {
			if !strings.Contains(cfg, want) {
				t.Errorf("deploy/prometheus/prometheus.yml lacks %q", want)
			}
		}
	})

	t.Run("dashboards", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join(deploy, "grafana", "dashboards", "*.json"))
		more, _ := filepath.Glob(filepath.Join(deploy, "grafana", "provisioning", "dashboards", "*.json"))
		files = append(files, more...)
		if len(files) == 0 {
			t.Fatal("no dashboard JSON in deploy/grafana/dashboards")
		}
		uids := map[string]bool{}
		for _, f := range files {
			d := readDashboard(t, f)
			uids[d.UID] = true
			checkDashboard(t, filepath.Base(f), d)
		}
		if !uids["dts-overview"] {
			t.Error(`no dashboard has uid "dts-overview"`)
		}
	})

	t.Run("overview keeps the original panels", func(t *testing.T) {
		d := readDashboard(t, filepath.Join(deploy, "grafana", "dashboards", "dts.json"))
		titles := map[string]bool{}
		for _, p := range allPanels(d.Panels) {
			titles[p.Title] = true
		}
		for _, want := range []string{"Jobs Processed (Rate/5m)", "Jobs Total Count", "Active Workers by State",
			"Queue Status", "Jobs in Queue Over Time", "Job Processing Duration", "Retry Attempts Distribution",
			"Lease Timeouts Rate", "Latency", "Throughput by job type", "Worker fleet", "Lease health", "Errors"} {
			if !titles[want] {
				t.Errorf("dts.json has no panel or row titled %q", want)
			}
		}
	})

	t.Run("grafana provisioning", func(t *testing.T) {
		ds := readFile(t, filepath.Join(deploy, "grafana", "provisioning", "datasources", "prometheus.yml"))
		for _, want := range []string{"name: Prometheus", "uid: prometheus", "url: http://prometheus:9090", "isDefault: true"} {
			if !strings.Contains(ds, want) {
				t.Errorf("datasources/prometheus.yml lacks %q", want)
			}
		}
		// The provider's path is where compose mounts deploy/grafana/dashboards,
		// and what cluster.sh rewrites to that directory for `make up`.
		prov := readFile(t, filepath.Join(deploy, "grafana", "provisioning", "dashboards", "dashboard.yml"))
		if !strings.Contains(prov, "path: /etc/grafana/dashboards") {
			t.Error("dashboards/dashboard.yml: the provider path is not /etc/grafana/dashboards")
		}
		compose := readFile(t, filepath.Join(deploy, "docker-compose.yml"))
		if !strings.Contains(compose, "./grafana/dashboards:/etc/grafana/dashboards") {
			t.Error("docker-compose.yml does not mount ./grafana/dashboards at /etc/grafana/dashboards")
		}
	})

	t.Run("metrics exist", func(t *testing.T) {
		defined := definedMetrics(t, root)
		check := func(where, expr string) {
			for _, m := range metricNames(expr) {
				if !metricDefined(m, defined) {
					t.Errorf("%s: metric %s is not defined in any Go source (expr %q)", where, m, expr)
				}
			}
		}
		d := readDashboard(t, filepath.Join(deploy, "grafana", "dashboards", "dts.json"))
		for _, p := range allPanels(d.Panels) {
			for _, tg := range p.Targets {
				check("dts.json panel "+p.Title, tg.Expr)
			}
		}
		for _, e := range ruleExprs(readFile(t, filepath.Join(deploy, "prometheus", "alerts.yml"))) {
			check("alerts.yml", e)
		}
	})

	t.Run("compose", func(t *testing.T) {
		checkCompose(t, readFile(t, filepath.Join(deploy, "docker-compose.yml")))
	})

	t.Run("dockerfiles", func(t *testing.T) {
		for _, svc := range []string{"submitter", "coordinator", "worker"} {
			name := "Dockerfile." + svc
			df := readFile(t, filepath.Join(deploy, name))
			for _, want := range []string{
				"CGO_ENABLED=0",
				"github.com/dtsched/dts/" + svc + "/cmd/" + svc,
				"FROM golang:", " AS build", "COPY --from=build", "FROM alpine:", "USER 10001", "HEALTHCHECK", "/healthz",
			} {
				if !strings.Contains(df, want) {
					t.Errorf("deploy/%s lacks %q", name, want)
				}
			}
			if _, err := os.Stat(filepath.Join(deploy, name+".dockerignore")); err != nil {
				t.Errorf("deploy/%s.dockerignore: %v (the repository root, with .run/, would be the build context)", name, err)
			}
		}
	})
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("repository root %s has no go.work: %v", root, err)
	}
	return root
}

// findPromtool finds promtool or fails: without it the alert rules go
// untested, which must not pass silently.
func findPromtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/promtool"); err == nil {
		return "/usr/bin/promtool"
	}
	t.Fatal("promtool not found (not on PATH, not /usr/bin/promtool): install it (Debian/Ubuntu: apt-get install prometheus; " +
		"or a release from https://prometheus.io/download/) or set PROMTOOL to its path; " +
		"the Prometheus config and alert rules cannot be checked without it")
	return ""
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dashboard is the part of Grafana's dashboard JSON model checked here.
type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func readDashboard(t *testing.T, path string) dashboard {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader([]byte(readFile(t, path))))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

// allPanels flattens rows: the panels of collapsed rows live inside them.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

func checkDashboard(t *testing.T, name string, d dashboard) {
	t.Helper()
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: dashboard without uid or title", name)
	}
	ids := map[int]string{}
	for _, p := range allPanels(d.Panels) {
		if prev, ok := ids[p.ID]; ok {
			t.Errorf("%s: panels %q and %q share id %d", name, prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.Title == "" {
			t.Errorf("%s: panel %d has no title", name, p.ID)
		}
		if p.Datasource == nil || p.Datasource.UID != "prometheus" {
			t.Errorf("%s: panel %q does not use datasource uid \"prometheus\"", name, p.Title)
		}
		withExpr := 0
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) != "" {
				withExpr++
			}
			if tg.Datasource != nil && tg.Datasource.UID != "prometheus" {
				t.Errorf("%s: panel %q target %s uses datasource uid %q", name, p.Title, tg.RefID, tg.Datasource.UID)
			}
		}
		if withExpr == 0 {
			t.Errorf("%s: panel %q has no target with an expr", name, p.Title)
		}
	}
}

// ruleExprs extracts the expr of every rule in a rules file: a one-line
// `expr: ...` or a block scalar `expr: |` followed by deeper lines.
func ruleExprs(yml string) []string {
	var exprs []string
	lines := strings.Split(yml, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		trimmed := strings.TrimSpace(l)
		if !strings.HasPrefix(trimmed, "expr:") {
			continue
		}
		v := strings.TrimSpace(strings.TrimPrefix(trimmed, "expr:"))
		if v != "|" && v != ">" && v != "|-" && v != ">-" {
			exprs = append(exprs, v)
			continue
		}
		indent := len(l) - len(strings.TrimLeft(l, " "))
		var b strings.Builder
		for i+1 < len(lines) {
			next := lines[i+1]
			if strings.TrimSpace(next) != "" && len(next)-len(strings.TrimLeft(next, " ")) <= indent {
				break
			}
			b.WriteString(next + "\n")
			i++
		}
		exprs = append(exprs, b.String())
	}
	return exprs
}

var (
	promStrings    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers   = regexp.MustCompile(`\{[^}]*\}`)
	promRanges     = regexp.MustCompile(`\[[^\]]*\]`)
	promLabelLists = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent      = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promNumber     = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b`)
	promWords      = map[string]bool{
		// aggregations, keywords and the functions used in deploy/
		"sum": true, "min": true, "max": true, "avg": true, "count": true, "topk": true, "bottomk": true,
		"quantile": true, "stddev": true, "and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"rate": true, "irate": true, "increase": true, "delta": true, "idelta": true, "deriv": true,
		"histogram_quantile": true, "absent": true, "absent_over_time": true, "round": true, "clamp_min": true,
		"clamp_max": true, "vector": true, "scalar": true, "time": true, "label_replace": true, "abs": true,
		"max_over_time": true, "min_over_time": true, "avg_over_time": true, "changes": true, "resets": true,
	}
)

// metricNames lists the metric names a PromQL expression selects. It is no
// parser: it drops strings, label matchers, ranges, label lists and
// Grafana's $variables, and keeps the identifiers that are not PromQL words.
func metricNames(expr string) []string {
	s := promStrings.ReplaceAllString(expr, " ")
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRanges.ReplaceAllString(s, " ")
	s = promLabelLists.ReplaceAllString(s, " ")
	s = regexp.MustCompile(`\$\w+`).ReplaceAllString(s, " ")
	s = promNumber.ReplaceAllString(s, " ")
	var names []string
	for _, id := range promIdent.FindAllString(s, -1) {
		if !promWords[id] && !slices.Contains(names, id) {
			names = append(names, id)
		}
	}
	return names
}

// definedMetrics collects every string literal of the services' and shared
// packages' non-test Go files: metric names are among them.
func definedMetrics(t *testing.T, root string) map[string]bool {
	t.Helper()
	lit := regexp.MustCompile(`"([a-z_:][a-z0-9_:]*)"`)
	defined := map[string]bool{}
	for _, dir := range []string{"coordinator", "submitter", "worker", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
				defined[m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(defined) == 0 {
		t.Fatal("no Go sources found under the service directories")
	}
	return defined
}

// metricDefined: m is defined in Go, is a series of a defined histogram, or
// comes from Prometheus itself or client_golang's Go and process collectors.
func metricDefined(m string, defined map[string]bool) bool {
	if m == "up" || strings.HasPrefix(m, "go_") || strings.HasPrefix(m, "process_") {
		return true
	}
	if defined[m] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(m, suffix); ok && defined[base] {
			return true
		}
	}
	return false
}

// checkCompose checks docker-compose.yml with string matching (the e2e
// module has no YAML parser): the services, their healthchecks and the
// start-up order.
func checkCompose(t *testing.T, compose string) {
	t.Helper()
	if strings.Contains(compose, "\t") {
		t.Error("docker-compose.yml contains a tab (YAML indents with spaces)")
	}
	if regexp.MustCompile(`(?m)^version:`).MatchString(compose) {
		t.Error("docker-compose.yml has a top-level version: key (obsolete in the Compose specification)")
	}
	if !regexp.MustCompile(`(?m)^services:\s*$`).MatchString(compose) {
		t.Fatal("docker-compose.yml has no top-level services: key")
	}
	// services maps each top-level service to its block of lines.
	services := map[string]string{}
	var cur string
	inServices := false
	for _, l := range strings.Split(compose, "\n") {
		switch {
		case strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#"):
			continue
		case !strings.HasPrefix(l, " "):
			inServices = strings.HasPrefix(l, "services:")
			cur = ""
		case inServices && strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, "   "):
			cur = strings.TrimSuffix(strings.TrimSpace(l), ":")
			services[cur] = ""
		case inServices && cur != "":
			services[cur] += l + "\n"
		}
	}
	want := map[string][]string{
		"postgres":    {"image: postgres:16", "pg_isready", "healthcheck:", "volumes:"},
		"redis":       {"image: redis:7", "--appendonly", "redis-cli", "healthcheck:"},
		"prometheus":  {"image: prom/prometheus", "./prometheus:/etc/prometheus", "healthcheck:"},
		"grafana":     {"image: grafana/grafana", "3000:3000", "GF_SECURITY_ADMIN_PASSWORD: ${GRAFANA_ADMIN_PASSWORD:-admin}", "./grafana/provisioning:/etc/grafana/provisioning", "healthcheck:"},
		"submitter":   {"dockerfile: deploy/Dockerfile.submitter", "SUBMITTER_ADDR: 0.0.0.0:8000", "8000:8000", "http://127.0.0.1:8000/healthz", "condition: service_healthy"},
		"coordinator": {"dockerfile: deploy/Dockerfile.coordinator", "COORDINATOR_ADDR: 0.0.0.0:9000", "9000:9000", "http://127.0.0.1:9000/healthz", "condition: service_healthy"},
		"worker-1":    {"<<: *worker", "WORKER_ID: worker-1", "WORKER_ADDR: 0.0.0.0:7001", "http://127.0.0.1:7001/healthz"},
		"worker-2":    {"<<: *worker", "WORKER_ID: worker-2", "WORKER_ADDR: 0.0.0.0:7002", "http://127.0.0.1:7002/healthz"},
		"worker-3":    {"<<: *worker", "WORKER_ID: worker-3", "WORKER_ADDR: 0.0.0.0:7003", "http://127.0.0.1:7003/healthz"},
		"worker":      {"<<: *worker", "replicas:", "WORKER_ADDR: 0.0.0.0:7001", "http://127.0.0.1:7001/healthz"},
	}
	for name, needles := range want {
		block, ok := services[name]
		if !ok {
			t.Errorf("docker-compose.yml has no service %q (have %v)", name, mapKeys(services))
			continue
		}
		for _, n := range needles {
			if !strings.Contains(block, n) {
				t.Errorf("docker-compose.yml service %s lacks %q", name, n)
			}
		}
		if strings.Contains(name, "worker") && strings.Contains(block, "DATABASE_URL") {
			t.Errorf("docker-compose.yml service %s gets DATABASE_URL; workers talk to Redis only", name)
		}
	}
	for _, n := range []string{
		"DATABASE_URL: postgres://dts:dts@postgres:5432/dts?sslmode=disable",
		"REDIS_URL: redis://redis:6379/0",
		"dockerfile: deploy/Dockerfile.worker",
		"condition: service_healthy",
	} {
		if !strings.Contains(compose, n) {
			t.Errorf("docker-compose.yml lacks %q", n)
		}
	}
}

func mapKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
