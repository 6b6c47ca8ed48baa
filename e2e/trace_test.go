package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/devcluster/process"
	"github.com/dtsched/dts/internal/testwait"
)

// jaegerVersion is the Jaeger that deploy/local/prereqs.sh builds (test
// profile) into the cache that jaegerBinary reads.
const jaegerVersion = "v1.76.0"

// jaegerBinary is the cached Jaeger build: DTS_JAEGER, else
// <user cache dir>/dts/jaeger-<version>/jaeger.
func jaegerBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("DTS_JAEGER")
	if bin == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(dir, "dts", "jaeger-"+jaegerVersion, "jaeger")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Jaeger %s is not built at %s: run `bash deploy/local/prereqs.sh test` (it builds it once from the Go module proxy)", jaegerVersion, bin)
	}
	return bin
}

// jaeger is a real Jaeger (all in one, in-memory storage) on free
// loopback ports: OTLP over HTTP in, the query API out.
type jaeger struct {
	otlp  string // the OTLP/HTTP endpoint, http://host:port
	query string // the query API's base URL
}

func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	dir := t.TempDir()
	j := &jaeger{otlp: "http://" + freeAddr(t), query: "http://" + freeAddr(t)}
	config := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: %s
    grpc:
      endpoint: %s
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 1000
receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
processors:
  batch:
    timeout: 50ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`, strings.TrimPrefix(j.query, "http://"), freeAddr(t), strings.TrimPrefix(j.otlp, "http://"))
	path := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &process.Group{LogDir: dir}
	srv := process.MustStart(t, g, process.Spec{Name: "jaeger", Path: jaegerBinary(t), Args: []string{"--config", path}})
	t.Cleanup(func() {
		g.Kill()
		if t.Failed() {
			t.Logf("---- jaeger log (tail) ----\n%s", srv.Tail(40))
		}
	})
	err := testwait.Until(t, 20*time.Second, func() error {
		if !srv.Running() {
			return testwait.GiveUp(errors.New("it exited"))
		}
		resp, err := http.Get(j.query + "/api/services")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /api/services: %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("jaeger did not start within 20 s (its query API answering): %v\n%s", err, srv.Tail(40))
	}
	return j
}

// jaegerSpan is a span as Jaeger's query API (GET /api/traces/{id}) shows it.
type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	ProcessID     string `json:"processID"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	service string
}

// parent is the span id of the span's CHILD_OF reference; "" for none.
func (s jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

func (s jaegerSpan) tag(key string) string {
	for _, tg := range s.Tags {
		if tg.Key == key {
			return fmt.Sprint(tg.Value)
		}
	}
	return ""
}

// trace reads trace id's spans from Jaeger: none while it has not seen it.
func (j *jaeger) trace(t *testing.T, id string) []jaegerSpan {
	t.Helper()
	resp, err := http.Get(j.query + "/api/traces/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/traces/%s: %d %s", id, resp.StatusCode, b)
	}
	var out struct {
		Data []struct {
			Spans     []jaegerSpan `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
			} `json:"processes"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("GET /api/traces/%s: %v: %s", id, err, b)
	}
	var spans []jaegerSpan
	for _, d := range out.Data {
		for _, s := range d.Spans {
			s.service = d.Processes[s.ProcessID].ServiceName
			spans = append(spans, s)
		}
	}
	return spans
}

// waitTrace polls Jaeger until trace id holds every span name of want (as
// many of each as want names it), and returns its spans.
func (j *jaeger) waitTrace(t *testing.T, id string, want ...string) []jaegerSpan {
	t.Helper()
	var spans []jaegerSpan
	testwait.NoError(t, 15*time.Second, "trace "+id+" to hold "+strings.Join(want, ", "), func() error {
		spans = j.trace(t, id)
		missing := slices.Clone(want)
		for _, s := range spans {
			if i := slices.Index(missing, s.OperationName); i >= 0 {
				missing = slices.Delete(missing, i, i+1)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		names := make([]string, len(spans))
		for i, s := range spans {
			names[i] = s.service + "/" + s.OperationName
		}
		return fmt.Errorf("it lacks %v; it has %v", missing, names)
	})
	return spans
}

// submitTraced submits a job with a W3C traceparent header and returns its
// id.
func submitTraced(t *testing.T, c *cluster, traceparent string, job map[string]any) string {
	t.Helper()
	body, _ := json.Marshal(job)
	req, err := http.NewRequest("POST", c.submitter+"/submit_job", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &out) != nil || out["job_id"] == nil {
		t.Fatalf("submit %v: %d %s", job, resp.StatusCode, b)
	}
	return out["job_id"].(string)
}

// TestTraceFromSubmitToHandler: with the OTEL_* variables pointing the
// three processes at a real Jaeger, a job submitted with a traceparent
// leaves one whole trace there: the submit request and its insert (the
// submitter), the claim and delivery (the leader), the attempt (the
// worker) with the span its handler made itself inside it, and the result
// being applied (the leader), each a child of the one before as the job
// went. A job that fails once has two attempt spans, the second linked to
// the first. GET /jobs/{id} names the trace, and the Job page links to it
// (TRACE_URL).
func TestTraceFromSubmitToHandler(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	c := newCluster(t, "OTEL_EXPORTER_OTLP_ENDPOINT="+j.otlp, "OTEL_BSP_SCHEDULE_DELAY=50",
		"TRACE_URL=http://jaeger.example:16686/trace/{trace_id}")
	c.startSubmitter()
	c.startCoordinator("c1")
	c.start("w1", "sdkworker", "WORKER_ADDR", "WORKER_ID=w1", "SDK_JOB_NAMES=zz_traced")

	const (
		okTrace    = "4bf92f3577b34da6a3ce929d0e0e4736"
		retryTrace = "5cf92f3577b34da6a3ce929d0e0e4737"
		caller     = "00f067aa0ba902b7" // the submitting client's span
	)
	ok := submitTraced(t, c, "00-"+okTrace+"-"+caller+"-01", map[string]any{"name": "zz_traced", "payload": "hello"})
	retried := submitTraced(t, c, "00-"+retryTrace+"-"+caller+"-01",
		map[string]any{"name": "zz_traced", "payload": "fail_first_attempt", "max_retries": 2})
	c.waitStatus(ok, "completed", 15*time.Second)
	c.waitStatus(retried, "completed", 15*time.Second)
	if got := c.job(ok)["trace_id"]; got != okTrace {
		t.Errorf("GET /jobs/%s trace_id = %v, want %s", ok, got, okTrace)
	}
	resp, err := http.Get(c.submitter + "/ui/jobs/" + ok)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `href="http://jaeger.example:16686/trace/` + okTrace + `"`; resp.StatusCode != http.StatusOK || !bytes.Contains(page, []byte(want)) {
		t.Errorf("the Job page (%d) has no link %s", resp.StatusCode, want)
	}

	spans := j.waitTrace(t, okTrace, "dts.submit", "dts.insert", "dts.claim", "dts.deliver", "dts.attempt",
		"sdkworker.shout", "dts.apply_result")
	by := map[string]jaegerSpan{}
	for _, s := range spans {
		by[s.OperationName] = s
	}
	for _, link := range []struct{ span, parent, service string }{
		{"dts.submit", "", "dts-submitter"}, // its parent is the caller's span, not in Jaeger
		{"dts.insert", "dts.submit", "dts-submitter"},
		{"dts.claim", "dts.submit", "dts-coordinator"},
		{"dts.deliver", "dts.submit", "dts-coordinator"},
		{"dts.attempt", "dts.deliver", "sdkworker"},
		{"sdkworker.shout", "dts.attempt", "sdkworker"},
		{"dts.apply_result", "dts.deliver", "dts-coordinator"},
	} {
		s := by[link.span]
		want := caller
		if link.parent != "" {
			want = by[link.parent].SpanID
		}
		if s.parent() != want {
			t.Errorf("%s's parent is span %q, want %s (%q)", link.span, s.parent(), link.parent, want)
		}
		if s.service != link.service {
			t.Errorf("%s comes from service %q, want %q", link.span, s.service, link.service)
		}
	}
	if got := by["dts.attempt"].tag("dts.job_id"); got != ok {
		t.Errorf("the attempt span's dts.job_id = %q, want %s", got, ok)
	}

	spans = j.waitTrace(t, retryTrace, "dts.attempt", "dts.attempt", "dts.apply_result", "dts.apply_result")
	var first, second jaegerSpan
	for _, s := range spans {
		if s.OperationName != "dts.attempt" {
			continue
		}
		switch s.tag("dts.attempt") {
		case "1":
			first = s
		case "2":
			second = s
		}
	}
	if first.SpanID == "" || second.SpanID == "" {
		t.Fatalf("no attempt spans 1 and 2 in %+v", spans)
	}
	if first.tag("dts.outcome") != "failed" || second.tag("dts.outcome") != "completed" {
		t.Errorf("attempt outcomes %q, %q; want failed, completed", first.tag("dts.outcome"), second.tag("dts.outcome"))
	}
	linked := false
	for _, r := range second.References {
		linked = linked || (r.SpanID == first.SpanID && r.RefType != "CHILD_OF")
	}
	if !linked {
		t.Errorf("the second attempt's span (references %+v) is not linked to the first's (%s)", second.References, first.SpanID)
	}
}
