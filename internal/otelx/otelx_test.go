package otelx

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestParseTraceParent(t *testing.T) {
	t.Parallel()
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc, err := ParseTraceParent(good)
	if err != nil || !sc.IsSampled() || !sc.IsRemote() || FormatTraceParent(sc) != good {
		t.Fatalf("ParseTraceParent(%q) = %v, %v", good, sc, err)
	}
	if TraceID(good) != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("TraceID = %q", TraceID(good))
	}
	for _, bad := range []string{"", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", // short
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span id
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // upper case
		good + "-x", // version 00 with more
	} {
		if _, err := ParseTraceParent(bad); err == nil {
			t.Errorf("ParseTraceParent(%q) accepted it", bad)
		}
	}
	if _, err := ParseTraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"); err != nil {
		t.Errorf("a later version's first fields were refused: %v", err)
	}
}

func TestWanted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env     map[string]string
		on, bad bool
	}{
		{env: nil},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, bad: true},
	} {
		on, err := wanted(func(k string) string { return tc.env[k] })
		if on != tc.on || (err != nil) != tc.bad {
			t.Errorf("wanted(%v) = %v, %v; want %v, error %v", tc.env, on, err, tc.on, tc.bad)
		}
	}
}

// TestSpanIDs: the first attempt's span id is a function of the trace and
// the job, and only the span started from a WithSpanID context takes it.
func TestSpanIDs(t *testing.T) {
	t.Parallel()
	tid := trace.TraceID{1, 2, 3}
	a, b := AttemptSpanID(tid, 7), AttemptSpanID(tid, 8)
	if a != AttemptSpanID(tid, 7) || a == b || !a.IsValid() {
		t.Errorf("AttemptSpanID: %v, %v", a, b)
	}
	g := idGenerator{}
	if got := g.NewSpanID(WithSpanID(context.Background(), a), tid); got != a {
		t.Errorf("NewSpanID with WithSpanID = %v, want %v", got, a)
	}
	if got := g.NewSpanID(context.Background(), tid); got == a || !got.IsValid() {
		t.Errorf("NewSpanID without = %v", got)
	}
}
