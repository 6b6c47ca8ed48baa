// Package otelx sets up OpenTelemetry tracing for the three binaries and
// holds the few helpers they share to carry a job's trace from the submit
// request to the handler that runs it (docs/operations.md, "Tracing").
//
// Tracing is off unless the standard OTEL_* variables ask for an OTLP
// exporter. Off, the tracer is a no-op and Enabled is false: callers test
// Enabled (an atomic load) before they build anything for a span, so a job
// without a trace costs nothing on the hot paths (insert, claim, delivery,
// attempt, result). A trace parent that came with a job is still carried
// through as text when tracing is off, so that a process further on that
// traces can continue it.
//
// The W3C trace context text (`traceparent`) is what is stored with a job
// and what a delivery carries: version 00, 32 hex digits of trace id, 16 of
// parent span id, 2 of flags.
package otelx

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every dts span.
const ScopeName = "github.com/dtsched/dts"

var (
	enabled atomic.Bool
	tracer  atomic.Pointer[trace.Tracer]
)

func init() {
	t := noop.NewTracerProvider().Tracer(ScopeName)
	tracer.Store(&t)
}

// Enabled reports whether this process exports spans.
func Enabled() bool { return enabled.Load() }

// Tracer is the process's tracer: a no-op one while tracing is off.
func Tracer() trace.Tracer { return *tracer.Load() }

// Setup turns tracing on when the OTEL_* variables (read with getenv) ask
// for it: OTEL_TRACES_EXPORTER=otlp, or unset with an OTLP endpoint set
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
// OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none keep it off. The
// exporter is OTLP over HTTP (protobuf); the SDK reads the rest of its
// settings (endpoint, headers, sampler, batching) from the same standard
// variables. service is the service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES name one. The returned shutdown flushes the
// spans not yet exported; with tracing off it does nothing.
func Setup(ctx context.Context, service string, getenv func(string) string) (shutdown func(context.Context) error, err error) {
	nothing := func(context.Context) error { return nil }
	on, err := wanted(getenv)
	if err != nil || !on {
		return nothing, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nothing, fmt.Errorf("otlp trace exporter: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithBatcher(exp),
		sdktrace.WithIDGenerator(idGenerator{}),
	}
	if getenv("OTEL_SERVICE_NAME") == "" && !strings.Contains(getenv("OTEL_RESOURCE_ATTRIBUTES"), "service.name=") {
		opts = append(opts, sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	t := tp.Tracer(ScopeName)
	tracer.Store(&t)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	enabled.Store(true)
	return func(ctx context.Context) error {
		enabled.Store(false)
		return tp.Shutdown(ctx)
	}, nil
}

// wanted decides from the environment whether to export spans.
func wanted(getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	case "otlp":
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not supported (otlp or none)", exp)
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return false, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not supported (http/protobuf)", proto)
	}
	return true, nil
}

// ParseTraceParent decodes a W3C traceparent. It accepts version 00 and,
// as the specification asks, the first 55 characters of a later version.
func ParseTraceParent(s string) (trace.SpanContext, error) {
	bad := errors.New("not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)")
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' || (len(s) > 55 && (s[:2] == "00" || s[55] != '-')) || s[:2] == "ff" {
		return trace.SpanContext{}, bad
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	var ver [1]byte
	if !isLowerHex(s[:55]) {
		return trace.SpanContext{}, bad
	}
	if _, err := hex.Decode(ver[:], []byte(s[:2])); err != nil {
		return trace.SpanContext{}, bad
	}
	if _, err := hex.Decode(tid[:], []byte(s[3:35])); err != nil {
		return trace.SpanContext{}, bad
	}
	if _, err := hex.Decode(sid[:], []byte(s[36:52])); err != nil {
		return trace.SpanContext{}, bad
	}
	if _, err := hex.Decode(flags[:], []byte(s[53:55])); err != nil {
		return trace.SpanContext{}, bad
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true,
	})
	if !sc.IsValid() {
		return trace.SpanContext{}, bad
	}
	return sc, nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '-' && (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// FormatTraceParent is the traceparent of sc; "" for an invalid one.
func FormatTraceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// TraceParent is the traceparent of the span in ctx; "" when it has none.
func TraceParent(ctx context.Context) string {
	return FormatTraceParent(trace.SpanContextFromContext(ctx))
}

// TraceID is the trace id (32 hex digits) of a traceparent, without
// checking more than its shape; "" when it has none.
func TraceID(traceparent string) string {
	if len(traceparent) < 55 || traceparent[2] != '-' || traceparent[35] != '-' {
		return ""
	}
	return traceparent[3:35]
}

// ContextWithParent returns ctx with traceparent's span as the remote
// parent of the spans started from it; ctx itself when traceparent is not
// valid.
func ContextWithParent(ctx context.Context, traceparent string) context.Context {
	sc, err := ParseTraceParent(traceparent)
	if err != nil {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

type spanIDKey struct{}

// WithSpanID makes the next span started from ctx in the same trace take
// id instead of a random one. It lets a retry link to its job's first
// attempt without the first attempt's id being stored anywhere: both
// compute it (AttemptSpanID).
func WithSpanID(ctx context.Context, id trace.SpanID) context.Context {
	return context.WithValue(ctx, spanIDKey{}, id)
}

// AttemptSpanID is the span id of the first attempt of job jobID in trace
// tid: a hash of the two, so that every later attempt can link to it.
func AttemptSpanID(tid trace.TraceID, jobID int64) trace.SpanID {
	h := fnv.New64a()
	h.Write(tid[:])
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(jobID))
	h.Write(b[:])
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], h.Sum64()|1) // never the invalid all-zero id
	return sid
}

// idGenerator makes random ids, but the span id a context asks for with
// WithSpanID.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
	binary.BigEndian.PutUint64(tid[8:], rand.Uint64()|1)
	return tid, randomSpanID()
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if id, ok := ctx.Value(spanIDKey{}).(trace.SpanID); ok && id.IsValid() {
		return id
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], rand.Uint64()|1)
	return sid
}

// SetupProcess is Setup for a binary's main: the returned stop flushes
// the spans not yet exported, waiting at most flushTimeout.
func SetupProcess(ctx context.Context, service string, getenv func(string) string) (stop func(), err error) {
	shutdown, err := Setup(ctx, service, getenv)
	if err != nil {
		return func() {}, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		_ = shutdown(ctx) // spans lost at exit are not worth failing it
	}, nil
}

// flushTimeout bounds the export of the last spans at exit.
const flushTimeout = 5 * time.Second
