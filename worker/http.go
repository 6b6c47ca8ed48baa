package worker

import (
	"net/http"

	"github.com/dtsched/dts/internal/probe"
)

// Handler serves /healthz and /metrics (internal/probe, the same handlers
// as the submitter's and the coordinator's).
func (w *Worker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", probe.Healthz(func() map[string]any {
		return map[string]any{"worker_id": w.cfg.ID, "draining": w.draining.Load(),
			"in_flight": w.inFlightCount(), "concurrency": w.cfg.Concurrency}
	}))
	mux.Handle("GET /metrics", probe.Metrics(w.reg, w.log))
	return mux
}
