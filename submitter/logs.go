package submitter

import (
	"context"
	"net/http"
	"strconv"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file serves a job's own log lines (GET /jobs/{id}/logs): what its
// handlers logged, per attempt, as the coordinator stored them from the
// workers' results (internal/store/logs.go). The console's Job page reads
// them through the same service call, JobLogs.

// getJobLogs handles GET /jobs/{id}/logs[?attempt=N][&after=SEQ][&limit=N].
func (s *Server) getJobLogs(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	q := JobLogsQuery{ID: id}
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
				p.name, p.min, p.max, truncate(raw, 40))
		}
		*p.dst = v
	}
	logs, err := s.svc.JobLogs(r.Context(), q)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, logs)
	return nil
}

// JobLogsQuery selects a job's log lines.
type JobLogsQuery struct {
	ID      int64
	Attempt int64 // 0: every attempt
	After   int64 // only lines with a greater seq (a follower's last)
	Limit   int64 // 0: wire.MaxJobLogPage
}

// JobLogs returns a job's log lines after q.After, oldest first, at most
// q.Limit (wire.MaxJobLogPage), with the dropped counts of its attempts;
// job.ErrNotFound if there is no such job. A follower asks again with
// NextAfter.
func (v service) JobLogs(ctx context.Context, q JobLogsQuery) (wire.JobLogs, error) {
	limit := q.Limit
	if limit <= 0 || limit > wire.MaxJobLogPage {
		limit = wire.MaxJobLogPage
	}
	lines, drops, err := v.s.store.JobLogsGet(ctx, store.JobLogsQuery{ID: q.ID, Attempt: int(q.Attempt), After: q.After, Limit: int(limit)})
	if err != nil {
		return wire.JobLogs{}, v.s.storeError(storeOpGet, err)
	}
	out := wire.JobLogs{JobID: strconv.FormatInt(q.ID, 10), Lines: make([]wire.JobLogLine, len(lines)),
		Dropped: make([]wire.JobLogDropped, len(drops)), NextAfter: q.After, More: int64(len(lines)) == limit}
	for i, l := range lines {
		out.Lines[i] = wire.JobLogLine{Seq: l.Seq, Attempt: l.Attempt, Time: l.At.UTC(), Level: l.Level, Message: l.Message}
		out.NextAfter = l.Seq
	}
	for i, d := range drops {
		out.Dropped[i] = wire.JobLogDropped{Attempt: d.Attempt, Dropped: d.Dropped}
	}
	return out, nil
}
