package api

import (
	"net/http"
	"strconv"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/app"
)

// This file serves a job's own log lines (GET /jobs/{id}/logs): what its
// handlers logged, per attempt, as the coordinator stored them from the
// workers' results (internal/store/logs.go). The console's Job page reads
// them through the same call, app.JobLogs.

// getJobLogs handles GET /jobs/{id}/logs[?attempt=N][&after=SEQ][&limit=N].
func (h *API) getJobLogs(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	q := app.JobLogsQuery{ID: id}
	for _, p := range []struct {
		name string
		dst  *int64
		min  int64
		max  int64
	}{
		{"attempt", &q.Attempt, 1, 1<<31 - 1},
		{"after", &q.After, 0, 1<<63 - 1},
		{"limit", &q.Limit, 1, wire.MaxJobLogPage},
	} {
		raw := r.URL.Query().Get(p.name)
		if raw == "" {
			continue
		}
		v, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || v < p.min || v > p.max {
			return httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidField, "%s must be an integer from %d to %d, got %q",
				p.name, p.min, p.max, app.Truncate(raw, 40))
		}
		*p.dst = v
	}
	logs, err := h.app.JobLogs(r.Context(), q)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, logs)
	return nil
}
