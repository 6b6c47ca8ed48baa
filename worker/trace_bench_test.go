package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dtsched/dts/internal/otelx"
	"github.com/dtsched/dts/internal/wire"
)

// BenchmarkAttemptTracingOff: the worker's attempt path (execute, report)
// as it was before tracing (before), and with the tracing hook as
// receive.go runs it while tracing is off, for a job without a trace
// (off) and for one that has a traceparent (off_traced_job: passed
// through, no span). The hook must add no allocation and no measurable
// time.
//
//	go test -run '^$' -bench BenchmarkAttemptTracingOff -benchmem -count 5 ./worker/
func BenchmarkAttemptTracingOff(b *testing.B) {
	if otelx.Enabled() {
		b.Fatal("tracing is on")
	}
	h := func(ctx context.Context, j *Job) (any, error) { return nil, nil }
	run := func(b *testing.B, traceparent string, hook bool) {
		w := &Worker{cfg: Config{ID: "bench", Concurrency: 1}, log: slog.New(slog.DiscardHandler),
			running: map[int64]*attempt{}, unsent: map[int64]time.Time{}, newest: map[int64]int64{}, queued: make(chan struct{}, 1)}
		w.metrics = newMetrics(prometheus.NewRegistry(), 1, func() int { return 0 })
		d := delivery(1, 1, "bench", 1)
		d.TraceParent = traceparent
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			d.LeaseToken = int64(i + 1)
			w.mu.Lock()
			w.running[d.LeaseToken] = &attempt{jobID: d.JobID}
			w.mu.Unlock()
			ctx := context.Background()
			var r wire.Result
			if hook {
				ctx, end := traceAttempt(ctx, &d)
				r = w.execute(ctx, h, d)
				if end != nil {
					end(&r)
				}
			} else {
				r = w.execute(ctx, h, d)
			}
			w.report(r, "bench")
			w.mu.Lock()
			w.toSend = w.toSend[:0]
			clear(w.unsent)
			w.mu.Unlock()
			<-w.queued
		}
	}
	b.Run("before", func(b *testing.B) { run(b, "", false) })
	b.Run("off", func(b *testing.B) { run(b, "", true) })
	b.Run("off_traced_job", func(b *testing.B) { run(b, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true) })
}
