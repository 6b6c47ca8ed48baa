package worker

import (
	"context"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dtsched/dts/internal/otelx"
	"github.com/dtsched/dts/internal/wire"
)

// SetupTracing turns on OpenTelemetry tracing when the standard OTEL_*
// variables ask for it (docs/operations.md, "Tracing"): OTLP over HTTP to
// OTEL_EXPORTER_OTLP_ENDPOINT. service is the service.name unless
// OTEL_SERVICE_NAME gives one. It also installs the tracer provider as
// OpenTelemetry's global one, so that spans a handler starts from its
// context (otel.Tracer(...).Start(ctx, ...)) join the job's trace. Call
// the returned function before exiting: it flushes the spans not yet
// exported. Without the variables it does nothing and costs nothing.
func SetupTracing(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	return otelx.Setup(ctx, service, os.Getenv)
}

// traceAttempt starts the span of an attempt of a traced job, a child of
// the delivery's trace context, and returns the handler's context, which
// carries it, and the function that ends it with the attempt's result.
// The first attempt's span has an id both it and every retry compute
// (otelx.AttemptSpanID), so a retry's span links to it without the first
// one's id being stored or sent. Jobs without a trace, or tracing off:
// ctx as it is and a nil end.
func traceAttempt(ctx context.Context, d *wire.Delivery) (context.Context, func(*wire.Result)) {
	if d.TraceParent == "" || !otelx.Enabled() {
		return ctx, nil
	}
	sc, err := otelx.ParseTraceParent(d.TraceParent)
	if err != nil {
		return ctx, nil
	}
	parent := trace.ContextWithRemoteSpanContext(ctx, sc)
	first := otelx.AttemptSpanID(sc.TraceID(), d.JobID)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.Int64("dts.job_id", d.JobID), attribute.String("dts.job_name", d.Name),
			attribute.Int("dts.attempt", d.Attempt))}
	if d.Attempt == 1 {
		parent = otelx.WithSpanID(parent, first)
	} else {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: sc.TraceID(), SpanID: first, TraceFlags: sc.TraceFlags(), Remote: true,
		}), Attributes: []attribute.KeyValue{attribute.String("dts.link", "first_attempt")}}))
	}
	_, span := otelx.Tracer().Start(parent, "dts.attempt", opts...)
	// The handler's context holds the span, not the id the first attempt
	// asked for: its own spans get ids of their own.
	return trace.ContextWithSpan(ctx, span), func(r *wire.Result) {
		span.SetAttributes(attribute.String("dts.outcome", r.Outcome))
		if r.Reason != "" {
			span.SetAttributes(attribute.String("dts.reason", r.Reason))
		}
		if r.Outcome == wire.OutcomeFailed {
			span.SetStatus(codes.Error, r.Error)
		}
		span.End(trace.WithTimestamp(r.FinishedAt))
	}
}
