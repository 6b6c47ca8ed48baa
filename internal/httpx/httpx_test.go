package httpx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    error
		status int
		code   string
		msg    string // substring; "" to skip
	}{
		{"httpx error", httpx.InvalidField("name", "required"), 400, wire.CodeInvalidField, "name: required"},
		{"wrapped httpx error", fmt.Errorf("x: %w", httpx.Errorf(409, wire.CodeConflict, "busy")), 409, wire.CodeConflict, "busy"},
		{"max bytes", fmt.Errorf("read: %w", &http.MaxBytesError{Limit: 10}), 413, wire.CodeBodyTooLarge, "10 bytes"},
		{"not found", fmt.Errorf("get job 5: %w", job.ErrNotFound), 404, wire.CodeNotFound, "job 5"},
		{"conflict", fmt.Errorf("cancel job 5: %w", job.ErrConflict), 409, wire.CodeConflict, "cancel job 5"},
		{"deadline", fmt.Errorf("q: %w", context.DeadlineExceeded), 503, wire.CodeUnavailable, ""},
		{"canceled", fmt.Errorf("q: %w", context.Canceled), 499, wire.CodeCanceled, ""},
		{"store unavailable", fmt.Errorf("get job 5: %w: dial tcp 10.0.0.1:5432: secret detail", job.ErrStoreUnavailable),
			503, wire.CodeStoreUnavailable, "database is unavailable"},
		{"store unavailable while the client left", fmt.Errorf("%w: %w", job.ErrStoreUnavailable, context.Canceled),
			499, wire.CodeCanceled, ""},
		{"store timeout", fmt.Errorf("%w: %w", job.ErrStoreUnavailable, context.DeadlineExceeded),
			503, wire.CodeStoreUnavailable, ""},
		{"other", errors.New("dial tcp 10.0.0.1:5432: secret detail"), 500, wire.CodeInternal, "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			status, body := httpx.Classify(tt.err)
			if status != tt.status || body.Code != tt.code || !strings.Contains(body.Message, tt.msg) {
				t.Errorf("Classify(%v) = %d %+v, want %d %s %q", tt.err, status, body, tt.status, tt.code, tt.msg)
			}
			if status >= 500 && strings.Contains(body.Message, "secret") {
				t.Errorf("500 message leaks the error: %q", body.Message)
			}
		})
	}
}

func TestDecodeStrict(t *testing.T) {
	t.Parallel()
	type target struct {
		Name  string `json:"name"`
		Count int    `json:"count"`
		List  []int  `json:"list"`
	}
	tests := []struct {
		name string
		in   string
		code string // "" for success
		msg  string
	}{
		{"ok", `{"name":"a","count":2}`, "", ""},
		{"ok with whitespace", " \n{\"name\":\"a\"}\n ", "", ""},
		{"empty", ``, wire.CodeInvalidJSON, "empty"},
		{"only spaces", `   `, wire.CodeInvalidJSON, "empty"},
		{"truncated", `{"name":`, wire.CodeInvalidJSON, "truncated"},
		{"syntax", `{"name" "a"}`, wire.CodeInvalidJSON, "byte offset"},
		{"trailing value", `{"name":"a"}{}`, wire.CodeInvalidJSON, "after the JSON value"},
		{"trailing garbage", `{"name":"a"} x`, wire.CodeInvalidJSON, "after the JSON value"},
		{"unknown field", `{"name":"a","nope":1}`, wire.CodeInvalidField, "nope: unknown field"},
		{"wrong type", `{"count":"3"}`, wire.CodeInvalidField, "count: must be an integer"},
		{"float for int", `{"count":1.5}`, wire.CodeInvalidField, "count: must be an integer"},
		{"huge int", `{"count":1e400}`, wire.CodeInvalidField, "count"},
		{"wrong element", `{"list":[1,"x"]}`, wire.CodeInvalidField, "list"},
		{"array at top", `[1]`, wire.CodeInvalidJSON, "must be an object, not array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var v target
			err := httpx.DecodeStrict([]byte(tt.in), &v)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("DecodeStrict(%q) = %v", tt.in, err)
				}
				return
			}
			var e *httpx.Error
			if !errors.As(err, &e) {
				t.Fatalf("DecodeStrict(%q) = %v, want *httpx.Error", tt.in, err)
			}
			if e.Status != 400 || e.Code != tt.code || !strings.Contains(e.Message, tt.msg) {
				t.Errorf("DecodeStrict(%q) = %d %s %q, want 400 %s containing %q", tt.in, e.Status, e.Code, e.Message, tt.code, tt.msg)
			}
		})
	}
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newTestRouter(t *testing.T) (*httptest.Server, *prometheus.Registry, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	r := httpx.NewRouter(logger, httpx.NewMetrics(reg))
	r.Get("/healthz", httpx.Healthz)
	r.Get("/items/{id}", httpx.Handler(func(w http.ResponseWriter, r *http.Request) error {
		switch chi.URLParam(r, "id") {
		case "missing":
			return fmt.Errorf("get item: %w", job.ErrNotFound)
		case "broken":
			return errors.New("database password=hunter2 exploded")
		case "panic":
			panic("boom")
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"id": chi.URLParam(r, "id")})
		return nil
	}))
	r.With(httpx.LimitBody(16)).Post("/echo", httpx.Handler(func(w http.ResponseWriter, r *http.Request) error {
		b, err := httpx.ReadBody(r)
		if err != nil {
			return err
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]int{"len": len(b)})
		return nil
	}))
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv, reg, logs
}

func do(t *testing.T, method, url string, body io.Reader) (int, wire.ErrorResponse, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e wire.ErrorResponse
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("%s %s: %d answer is not the JSON error shape: %q", method, url, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, e, resp.Header
}

func TestRouter(t *testing.T) {
	t.Parallel()
	srv, reg, logs := newTestRouter(t)
	tests := []struct {
		method, path string
		body         io.Reader
		status       int
		code         string
	}{
		{"GET", "/healthz", nil, 200, ""},
		{"GET", "/items/7", nil, 200, ""},
		{"GET", "/items/missing", nil, 404, wire.CodeNotFound},
		{"GET", "/items/broken", nil, 500, wire.CodeInternal},
		{"GET", "/items/panic", nil, 500, wire.CodeInternal},
		{"GET", "/nowhere", nil, 404, wire.CodeRouteNotFound},
		{"DELETE", "/items/7", nil, 405, wire.CodeMethodNotAllowed},
		{"POST", "/echo", strings.NewReader("0123456789"), 200, ""},
		{"POST", "/echo", strings.NewReader(strings.Repeat("x", 17)), 413, wire.CodeBodyTooLarge},
		// No Content-Length: the limit bites while reading.
		{"POST", "/echo", io.MultiReader(strings.NewReader(strings.Repeat("x", 100))), 413, wire.CodeBodyTooLarge},
	}
	for _, tt := range tests {
		status, e, h := do(t, tt.method, srv.URL+tt.path, tt.body)
		if status != tt.status || e.Error.Code != tt.code {
			t.Errorf("%s %s = %d %q, want %d %q", tt.method, tt.path, status, e.Error.Code, tt.status, tt.code)
		}
		if ct := h.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", tt.method, tt.path, ct)
		}
	}

	if _, _, h := do(t, "DELETE", srv.URL+"/echo", nil); h.Get("Allow") != "POST" {
		t.Errorf("405 Allow = %q, want POST", h.Get("Allow"))
	}

	// The server survived the panic and still answers.
	if status, _, _ := do(t, "GET", srv.URL+"/healthz", nil); status != 200 {
		t.Fatalf("after panic: healthz %d", status)
	}

	// Metrics carry the route pattern, not the path.
	if got := testutil.ToFloat64(mustCounter(t, reg, "/items/{id}", "GET", "404")); got != 1 {
		t.Errorf(`http_requests_total{route="/items/{id}",code="404"} = %v, want 1`, got)
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "unmatched", "GET", "404")); got != 1 {
		t.Errorf(`http_requests_total{route="unmatched",code="404"} = %v, want 1`, got)
	}
	if n, err := testutil.GatherAndCount(reg, "http_request_duration_seconds"); err != nil || n == 0 {
		t.Errorf("http_request_duration_seconds: %d series, %v", n, err)
	}

	// 5xx details are logged, never answered; the panic is logged with its stack.
	out := logs.String()
	for _, want := range []string{"hunter2", "panic: boom", `"route":"/items/{id}"`, `"status":500`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, route, method, code string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == route && labels["method"] == method && labels["code"] == code {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "c", Help: "c"}, m.GetCounter().GetValue)
			}
		}
	}
	t.Fatalf("no http_requests_total{route=%q,method=%q,code=%q}", route, method, code)
	return nil
}

// TestHealthzWith: the details sit beside "status": "ok", which they
// cannot override.
func TestHealthzWith(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		details func() map[string]any
		want    string
	}{
		{nil, `{"status":"ok"}`},
		{func() map[string]any { return map[string]any{"role": "leader", "status": "bad"} }, `{"role":"leader","status":"ok"}`},
	} {
		rec := httptest.NewRecorder()
		httpx.HealthzWith(tt.details)(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if got := strings.TrimSpace(rec.Body.String()); rec.Code != 200 || got != tt.want {
			t.Errorf("HealthzWith = %d %s, want 200 %s", rec.Code, got, tt.want)
		}
	}
}
