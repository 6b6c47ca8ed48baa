package coordinator

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dtsched/dts/internal/wire"
)

// TestHTTPAnswersOfAStandby: a standby's /healthz says so, and its
// /workers and unknown routes answer in the error shape of every service.
func TestHTTPAnswersOfAStandby(t *testing.T) {
	t.Parallel()
	c := &Coordinator{cfg: Config{ID: "c9"}, log: slog.New(slog.DiscardHandler), reg: newRegistry(), auth: &authState{}}
	h := c.Handler()
	get := func(path string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", path, ct)
		}
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v: %s", path, err, rec.Body)
		}
		return rec.Code, body
	}
	if status, body := get("/healthz"); status != 200 || body["status"] != "ok" || body["role"] != "standby" ||
		body["coordinator_id"] != "c9" || body["epoch"] != 0.0 {
		t.Errorf("/healthz = %d %v", status, body)
	}
	for path, want := range map[string]struct {
		status int
		code   string
	}{
		"/workers": {http.StatusServiceUnavailable, wire.CodeNotLeader},
		"/nope":    {http.StatusNotFound, wire.CodeRouteNotFound},
	} {
		status, body := get(path)
		e, _ := body["error"].(map[string]any)
		if status != want.status || e["code"] != want.code || e["message"] == "" {
			t.Errorf("%s = %d %v, want %d with code %s", path, status, body, want.status, want.code)
		}
	}
}
