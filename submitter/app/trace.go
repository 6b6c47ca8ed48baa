package app

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dtsched/dts/internal/otelx"
	"github.com/dtsched/dts/internal/store"
)

// TraceSubmit starts a submission's trace: the span of the request, a
// child of in, the request's W3C traceparent header ("" for none). It returns
// the context the insert runs in, the traceparent stored with the jobs
// ("" for none) and the function that ends the span.
//
// With tracing off it starts nothing: the request's own traceparent, if
// valid, is stored as it came, so that a coordinator or worker that traces
// continues it.
func TraceSubmit(ctx context.Context, in, name string) (context.Context, string, func(error)) {
	if !otelx.Enabled() {
		if in == "" {
			return ctx, "", endNothing
		}
		sc, err := otelx.ParseTraceParent(in)
		if err != nil {
			return ctx, "", endNothing
		}
		return ctx, otelx.FormatTraceParent(sc), endNothing
	}
	ctx, span := otelx.Tracer().Start(otelx.ContextWithParent(ctx, in), name,
		trace.WithSpanKind(trace.SpanKindServer))
	return ctx, otelx.TraceParent(ctx), func(err error) { endSpan(span, err) }
}

func endNothing(error) {}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceInsert starts the span of an insert when the submission is traced.
func traceInsert(ctx context.Context, params []store.JobInsertParams) (context.Context, func(error)) {
	if !otelx.Enabled() || !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, endNothing
	}
	ctx, span := otelx.Tracer().Start(ctx, "dts.insert", trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(attrJobs(len(params)))
	}
	return ctx, func(err error) { endSpan(span, err) }
}

func attrJobs(n int) attribute.KeyValue { return attribute.Int("dts.jobs", n) }
