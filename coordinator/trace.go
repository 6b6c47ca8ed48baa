package coordinator

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/dtsched/dts/internal/otelx"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// The leader's part of a job's trace (docs/operations.md, "Tracing"): for
// a job claimed with a trace parent it records a claim span (the claim
// statement) and a delivery span (the push to the worker's list), and the
// delivery carries the delivery span's traceparent, which the worker's
// attempt continues. The attempt's result, applied later, gets a span of
// its own under the same parent. Jobs without a trace take none of these
// paths: the book is empty and every check is an atomic load.

// traceBook remembers the traceparent each traced lease was delivered
// with, until its result is applied: the result does not carry it, and
// the applier needs it for its span and for the exemplars of the latency
// histograms. It lives in the leader's memory only: a new leader applies
// the results of leases it did not deliver without spans. Entries of
// leases that end otherwise (reclaimed, released unrun) are dropped when
// the book grows past maxTraceBook.
type traceBook struct {
	n  atomic.Int64
	mu sync.Mutex
	m  map[wire.InFlight]string // key: job id and lease token only
}

// maxTraceBook bounds the book: far more than the leases a fleet holds at
// once.
const maxTraceBook = 200_000

func (b *traceBook) put(jobID, token int64, traceparent string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil || len(b.m) >= maxTraceBook {
		b.m = map[wire.InFlight]string{}
	}
	b.m[wire.InFlight{JobID: jobID, LeaseToken: token}] = traceparent
	b.n.Store(int64(len(b.m)))
}

// take returns and forgets the traceparent of a lease; "" when it was
// not traced.
func (b *traceBook) take(jobID, token int64) string {
	if b.n.Load() == 0 {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := wire.InFlight{JobID: jobID, LeaseToken: token}
	tp, ok := b.m[k]
	if ok {
		delete(b.m, k)
		b.n.Store(int64(len(b.m)))
	}
	return tp
}

// traceDispatch records the claim span of a traced job and starts its
// delivery span; it returns the traceparent the delivery carries and the
// span to end once the push is done (nil when tracing is off: the stored
// traceparent is passed on as it is).
func traceDispatch(j *store.Claimed, claimStart, claimEnd time.Time) (string, trace.Span) {
	if !otelx.Enabled() {
		return j.TraceParent, nil
	}
	parent := otelx.ContextWithParent(context.Background(), j.TraceParent)
	attrs := trace.WithAttributes(attribute.Int64("dts.job_id", j.ID), attribute.String("dts.job_name", j.Name),
		attribute.Int("dts.attempt", j.Attempt), attribute.String("dts.worker_id", j.WorkerID))
	_, claim := otelx.Tracer().Start(parent, "dts.claim", trace.WithTimestamp(claimStart), attrs,
		trace.WithSpanKind(trace.SpanKindInternal))
	claim.End(trace.WithTimestamp(claimEnd))
	ctx, deliver := otelx.Tracer().Start(parent, "dts.deliver", attrs, trace.WithSpanKind(trace.SpanKindProducer))
	return otelx.TraceParent(ctx), deliver
}

// traceApplied records the span of a traced attempt's result being
// applied, from the batch's start to now.
func traceApplied(traceparent string, r *wire.Result, start time.Time, outcome string) {
	if !otelx.Enabled() {
		return
	}
	_, span := otelx.Tracer().Start(otelx.ContextWithParent(context.Background(), traceparent), "dts.apply_result",
		trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.Int64("dts.job_id", r.JobID), attribute.Int("dts.attempt", r.Attempt),
			attribute.String("dts.worker_id", r.WorkerID), attribute.String("dts.outcome", outcome)))
	span.End()
}

// observe records v in h, with the job's trace id as the exemplar when it
// has a trace.
func observe(h prometheus.Observer, v float64, traceparent string) {
	if id := otelx.TraceID(traceparent); id != "" {
		if eo, ok := h.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": id})
			return
		}
	}
	h.Observe(v)
}

// tracedOf takes from the book the traceparents of the leases whose
// results rs are: nil while no lease is traced.
func (a *resultApplier) tracedOf(rs []queue.ReceivedResult) map[int64]string {
	if a.l.traces.n.Load() == 0 {
		return nil
	}
	var out map[int64]string
	for i := range rs {
		r := &rs[i].Result
		if tp := a.l.traces.take(r.JobID, r.LeaseToken); tp != "" {
			if out == nil {
				out = map[int64]string{}
			}
			out[r.JobID] = tp
		}
	}
	return out
}
