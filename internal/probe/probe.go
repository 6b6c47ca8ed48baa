// Package probe holds what every dts process answers on HTTP whatever else
// it serves: /healthz, /metrics, and the JSON writer behind them. It imports
// only the standard library and Prometheus, so the worker library (which
// users fetch) serves its probes without pulling in the API's router and
// auth. internal/httpx builds on it for the submitter and the coordinator:
// one implementation of each.
package probe

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// WriteJSON answers with status and v as JSON. If v cannot be encoded it
// answers 500 internal instead (nothing has been written yet at that point).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":"internal","message":"internal error"}}` + "\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // the client went away: nothing to do
}

// Healthz returns the /healthz handler: 200 with {"status":"ok"} plus the
// fields details returns (a coordinator its role, a worker its jobs in
// flight); details may be nil.
func Healthz(details func() map[string]any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		body := map[string]any{}
		if details != nil {
			maps.Copy(body, details())
		}
		body["status"] = "ok"
		WriteJSON(w, http.StatusOK, body)
	}
}

// Metrics serves g in the Prometheus exposition format.
func Metrics(g prometheus.Gatherer, logger *slog.Logger) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
		// OpenMetrics, when the scraper asks for it, carries the latency
		// histograms' exemplars: the trace ids of traced jobs.
		EnableOpenMetrics: true,
	})
}
