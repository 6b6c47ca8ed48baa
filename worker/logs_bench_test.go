package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dtsched/dts/internal/wire"
)

// benchWorker is a Worker with no Redis behind it: enough to run attempts
// through execute and report.
func benchWorker() *Worker {
	w := &Worker{cfg: Config{ID: "bench", Concurrency: 1}, log: slog.New(slog.DiscardHandler),
		running: map[int64]*attempt{}, unsent: map[int64]time.Time{}, newest: map[int64]int64{}, queued: make(chan struct{}, 1)}
	w.metrics = newMetrics(prometheus.NewRegistry(), 1, func() int { return 0 })
	return w
}

// benchAttempts runs b.N attempts of h, each from its delivery to its
// result's binary form in a batch, as the sender writes it.
func benchAttempts(b *testing.B, h HandlerFunc) {
	w := benchWorker()
	d := delivery(1, 1, "bench", 1)
	var buf []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d.LeaseToken = int64(i + 1)
		w.mu.Lock()
		w.running[d.LeaseToken] = &attempt{jobID: d.JobID}
		w.mu.Unlock()
		w.report(w.execute(context.Background(), h, d), "bench")
		w.mu.Lock()
		batch := w.toSend
		w.toSend = w.toSend[:0]
		clear(w.unsent)
		w.mu.Unlock()
		buf = wire.AppendResultBatchWithLogs(buf[:0], batch)
		<-w.queued
	}
}

// BenchmarkAttempt: the worker's attempt path (execute, report, the
// result's encoding) for a handler that does not log, and for one that
// logs three lines with Job.Logger.
func BenchmarkAttempt(b *testing.B) {
	b.Run("no_logs", func(b *testing.B) {
		benchAttempts(b, func(context.Context, *Job) (any, error) { return nil, nil })
	})
	b.Run("3_lines", func(b *testing.B) {
		benchAttempts(b, func(_ context.Context, j *Job) (any, error) {
			log := j.Logger()
			log.Info("sending", "to", "ada@example.com")
			log.Info("sent", "id", 42)
			log.Warn("slow", "ms", 1200)
			return nil, nil
		})
	})
}
