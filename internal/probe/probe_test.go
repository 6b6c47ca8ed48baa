package probe_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dtsched/dts/internal/probe"
)

func TestHealthz(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	probe.Healthz(func() map[string]any { return map[string]any{"status": "overridden?", "role": "leader"} })(rec, httptest.NewRequest("GET", "/healthz", nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 200 {
		t.Fatalf("%d %s %v", rec.Code, rec.Body, err)
	}
	if body["status"] != "ok" || body["role"] != "leader" {
		t.Errorf("body = %v; want status ok and the details", body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
}

func TestWriteJSONUnencodable(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	probe.WriteJSON(rec, 200, math.Inf(1))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"internal"`) {
		t.Errorf("unencodable value: %d %s; want 500 internal", rec.Code, rec.Body)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "probe_test_total", Help: "x"})
	reg.MustRegister(c)
	c.Inc()
	rec := httptest.NewRecorder()
	probe.Metrics(reg, slog.New(slog.NewTextHandler(io.Discard, nil))).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "probe_test_total 1") {
		t.Errorf("metrics = %s", rec.Body)
	}
}
