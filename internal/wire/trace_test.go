package wire

import (
	"testing"
	"time"
)

// TestDeliveryTraceParent: a delivery's trace context ends its binary form
// only when AppendDeliveryTrace adds it (a worker that announced
// CodecTrace), and the parser reads it back; without it the form is the
// one older workers parse.
func TestDeliveryTraceParent(t *testing.T) {
	t.Parallel()
	d := Delivery{JobID: 7, Name: "n", Payload: []byte(`{}`), Attempt: 2, LeaseToken: 9, CreatedAt: time.Unix(1, 0),
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	plain := AppendDeliveryForLogs(nil, &d)
	traced := AppendDeliveryTrace(AppendDeliveryForLogs(nil, &d), &d)
	if len(traced) <= len(plain) {
		t.Fatalf("the trace context added nothing: %d bytes, %d without", len(traced), len(plain))
	}
	got, err := ParseDelivery(traced)
	if err != nil || got.TraceParent != d.TraceParent || got.JobID != 7 || got.Attempt != 2 {
		t.Fatalf("ParseDelivery(traced) = %+v, %v", got, err)
	}
	got, err = ParseDelivery(plain)
	if err != nil || got.TraceParent != "" {
		t.Fatalf("ParseDelivery(plain) = %+v, %v; want no trace context", got, err)
	}
	d.TraceParent = ""
	if b := AppendDeliveryTrace(AppendDelivery(nil, &d), &d); len(b) != len(AppendDelivery(nil, &d)) {
		t.Errorf("a delivery without a trace gained %d bytes", len(b)-len(AppendDelivery(nil, &d)))
	}
}
