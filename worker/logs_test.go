package worker

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/wire"
)

// TestJobLogger: what a handler logs with Job.Logger reaches the results
// stream, rendered (message, then key=value, groups as g.key), while the
// attempt runs (with a report of its own, the handler having reported no
// progress) and the rest with its result; the newest 64 KiB are kept and
// the dropped lines counted; a handler that never asks for the logger
// sends no logs.
func TestJobLogger(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	w := newTestWorker(t, redistest.URL(), prefix, Config{})
	seen, letGo := gate(t)
	w.Handle("logs", func(ctx context.Context, j *Job) (any, error) {
		log := j.Logger()
		log.Info("hello", "to", "ada lovelace", "n", 2)
		select {
		case <-seen:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		big := strings.Repeat("x", 1000)
		for range 70 {
			log.Debug(big)
		}
		log.Error("last")
		return nil, nil
	})
	w.Handle("nested", func(_ context.Context, j *Job) (any, error) {
		j.Logger().With("k", "v").WithGroup("g").Warn("nested", "a", 1, slog.Group("h", "b", true))
		return nil, nil
	})
	w.Handle("quiet", func(context.Context, *Job) (any, error) { return "ok", nil })
	c := newCoordinator(t, redistest.URL(), prefix, w.ID())
	c.codec = wire.CodecLogs
	run(t, w)

	c.deliver(delivery(1, 10, "logs", 1))
	p := c.results(1)[0]
	if p.Outcome != wire.OutcomeProgress || p.Logs == nil || len(p.Logs.Lines) != 1 || p.Progress != 0 || p.Message != "" {
		t.Fatalf("first report %+v (logs %+v); want a progress report with the first line and no progress", p, p.Logs)
	}
	if l := p.Logs.Lines[0]; l.Level != "INFO" || l.Message != `hello to="ada lovelace" n=2` || time.Since(l.Time) > waitLimit {
		t.Errorf("first line %+v", l)
	}
	letGo()
	r := c.results(1)[0]
	if r.Outcome != wire.OutcomeCompleted || r.Logs == nil {
		t.Fatalf("result %+v; want completed with logs", r)
	}
	lines, size := r.Logs.Lines, 0
	for _, l := range lines {
		size += l.Size()
	}
	if size > wire.MaxAttemptLogBytes || r.Logs.Dropped == 0 || r.Logs.Dropped+int64(len(lines)) != 71 {
		t.Errorf("result carries %d lines (%d bytes), %d dropped; want 71 in all, within %d bytes", len(lines), size, r.Logs.Dropped, wire.MaxAttemptLogBytes)
	}
	if last := lines[len(lines)-1]; last.Level != "ERROR" || last.Message != "last" {
		t.Errorf("last line %+v", last)
	}

	c.deliver(delivery(2, 20, "nested", 1))
	if r := c.results(1)[0]; r.Logs == nil || len(r.Logs.Lines) != 1 || r.Logs.Lines[0].Message != "nested k=v g.a=1 g.h.b=true" || r.Logs.Lines[0].Level != "WARN" {
		t.Errorf("result %+v, logs %+v; want the nested line", r, r.Logs)
	}

	c.deliver(delivery(3, 30, "quiet", 1))
	if r := c.results(1)[0]; r.Logs != nil || r.Outcome != wire.OutcomeCompleted {
		t.Errorf("quiet handler's result %+v, logs %+v; want no logs", r, r.Logs)
	}
}

// A Job the worker did not create keeps its lines and sends them nowhere.
func TestJobLoggerOutsideWorker(t *testing.T) {
	j := &Job{}
	j.Logger().Info("x", "a", "")
	if first, second := j.Logger(), j.Logger(); first != second {
		t.Error("Logger returned a new logger")
	}
}
