package wire

import (
	"encoding/binary"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleDelivery() Delivery {
	return Delivery{
		JobID: 1<<53 + 7, Name: "send_email", Queue: "critical", Payload: json.RawMessage(`{"to":"a@b.c","n":[1,2]}`),
		Attempt: 3, MaxRetries: 5, TimeoutSeconds: 300, LeaseToken: 1<<62 + 12345,
		CreatedAt: time.Date(2026, 11, 25, 3, 4, 5, 123456789, time.UTC),
	}
}

func sampleResult() Result {
	return Result{
		JobID: 42, LeaseToken: 1<<63 - 1, WorkerID: "worker-é-1", Attempt: 2, Outcome: OutcomeFailed,
		Result: json.RawMessage(`{"ok":false}`), Error: "boom\x00\nline", Reason: "timeout", Progress: 100,
		Message: "almost", StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		FinishedAt: time.Date(2026, 1, 2, 3, 4, 6, 7, time.UTC),
	}
}

func TestDeliveryRoundTrip(t *testing.T) {
	for _, d := range []Delivery{sampleDelivery(), {JobID: 1, Name: "x", LeaseToken: 1}} {
		b := AppendDelivery(nil, &d)
		if !IsBinary(b) {
			t.Fatalf("encoded delivery does not start with the magic byte: %q", b)
		}
		got, err := ParseDelivery(b)
		if err != nil {
			t.Fatalf("ParseDelivery: %v", err)
		}
		if !reflect.DeepEqual(got, d) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, d)
		}
	}
}

// DeliverySizeBound holds for the longest fixed fields there are:
// negative numbers, which take the most bytes as varints and in decimal.
func TestDeliverySizeBound(t *testing.T) {
	const minInt = -1 << 63
	worst := Delivery{JobID: minInt, LeaseToken: minInt, Attempt: -1, MaxRetries: -1, TimeoutSeconds: -1,
		CreatedAt: time.Unix(0, minInt), Name: "n", Queue: "q", Payload: json.RawMessage(`{"a":1}`),
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	for _, d := range []Delivery{worst, sampleDelivery(), {}} {
		b := AppendDeliveryTrace(AppendDeliveryForLogs(nil, &d), &d)
		if bound := DeliverySizeBound(&d); len(b) > bound {
			t.Errorf("delivery %+v: %d bytes, bound %d", d, len(b), bound)
		}
	}
}

func TestResultRoundTrip(t *testing.T) {
	for _, r := range []Result{sampleResult(), {JobID: 1, LeaseToken: 2, WorkerID: "w", Outcome: OutcomeCompleted}} {
		b := AppendResult(nil, &r)
		got, err := ParseResult(b)
		if err != nil {
			t.Fatalf("ParseResult: %v", err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
		}
	}
}

// The binary forms are what they replace, only smaller: a peer that sees a
// JSON message never mistakes it for a binary one.
func TestBinaryIsNotJSON(t *testing.T) {
	d, r := sampleDelivery(), sampleResult()
	for _, v := range []any{&d, &r} {
		b, _ := json.Marshal(v)
		if IsBinary(b) {
			t.Errorf("JSON %s reads as binary", b)
		}
	}
	if bin, js := AppendDelivery(nil, &d), mustJSON(t, &d); len(bin) >= len(js) {
		t.Errorf("binary delivery %d bytes, JSON %d", len(bin), len(js))
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every truncation of a valid message is refused, never misread.
func TestTruncatedRefused(t *testing.T) {
	d, r := sampleDelivery(), sampleResult()
	db, rb := AppendDelivery(nil, &d), AppendResult(nil, &r)
	for n := 0; n < len(db); n++ {
		if _, err := ParseDelivery(db[:n]); err == nil {
			t.Errorf("delivery cut to %d of %d bytes decoded", n, len(db))
		}
	}
	for n := 0; n < len(rb); n++ {
		if _, err := ParseResult(rb[:n]); err == nil {
			t.Errorf("result cut to %d of %d bytes decoded", n, len(rb))
		}
	}
	if _, err := ParseResult(append(rb, 0)); err == nil {
		t.Error("result with a trailing byte decoded")
	}
}

func TestOutOfRangeRefused(t *testing.T) {
	// A job id of 2^63 does not fit an int64.
	b := []byte{BinaryMagic, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}
	if _, err := ParseResult(b); err == nil {
		t.Error("job id 2^63 decoded")
	}
	// A lease token that is not a number.
	if _, err := ParseDelivery([]byte("\x01abc\x00")); err == nil {
		t.Error("lease token abc decoded")
	}
}

// A batch holds its results in order, each decoding as it was sent; every
// truncation of it, and a trailing byte, is refused.
func TestResultBatch(t *testing.T) {
	rs := []Result{sampleResult(), {JobID: 1, LeaseToken: 2, WorkerID: "w", Outcome: OutcomeCompleted}, sampleResult()}
	rs[2].JobID = 43
	b := AppendResultBatch(nil, rs)
	if !IsResultBatch(b) || !IsBinary(b) {
		t.Fatalf("batch %q does not read as one", b)
	}
	parts, err := SplitResultBatch(b)
	if err != nil || len(parts) != len(rs) {
		t.Fatalf("SplitResultBatch = %d parts, %v; want %d", len(parts), err, len(rs))
	}
	for i, p := range parts {
		got, err := ParseResult(p)
		if err != nil || !reflect.DeepEqual(got, rs[i]) {
			t.Errorf("result %d = %+v, %v; want %+v", i, got, err, rs[i])
		}
	}
	for n := 0; n < len(b); n++ {
		if _, err := SplitResultBatch(b[:n]); err == nil {
			t.Errorf("batch cut to %d of %d bytes split", n, len(b))
		}
	}
	if _, err := SplitResultBatch(append(b, 0)); err == nil {
		t.Error("batch with a trailing byte split")
	}
	if parts, err := SplitResultBatch(AppendResultBatch(nil, nil)); err != nil || len(parts) != 0 {
		t.Errorf("empty batch = %d parts, %v", len(parts), err)
	}
	// A batch is not a result, nor a result a batch.
	if _, err := ParseResult(b); err == nil {
		t.Error("a batch parsed as a result")
	}
	if _, err := SplitResultBatch(AppendResult(nil, &rs[0])); err == nil {
		t.Error("a result split as a batch")
	}
}

// A delivery marked for a leader that reads batches decodes as any other.
func TestDeliveryForBatches(t *testing.T) {
	d := sampleDelivery()
	b := AppendDeliveryForBatches(nil, &d)
	if b[0] != BatchMagic || !IsBinary(b) {
		t.Fatalf("delivery for batches starts with %#x", b[0])
	}
	got, err := ParseDelivery(b)
	if err != nil || !reflect.DeepEqual(got, d) {
		t.Errorf("ParseDelivery = %+v, %v; want %+v", got, err, d)
	}
}

// FuzzParse: no input panics either decoder, and whatever decodes encodes
// back to something that decodes to the same value.
func FuzzParse(f *testing.F) {
	d, r := sampleDelivery(), sampleResult()
	f.Add(AppendDelivery(nil, &d))
	f.Add(AppendResult(nil, &r))
	f.Add([]byte{BinaryMagic})
	f.Add(AppendResultBatch(nil, []Result{r, r}))
	f.Add([]byte("\x01123\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, err := ParseDelivery(b); err == nil {
			// A delivery that came with a trace context goes back with it
			// (the form a worker announcing CodecTrace gets).
			again, err := ParseDelivery(AppendDeliveryTrace(AppendDelivery(nil, &got), &got))
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("delivery %+v re-encoded: %+v, %v", got, again, err)
			}
		}
		if got, err := ParseResult(b); err == nil {
			// A result that came with logs goes back with them (the form
			// a leader reading logs gets); without, in the plain form.
			encode := AppendResult
			if got.Logs != nil {
				encode = AppendResultWithLogs
			}
			again, err := ParseResult(encode(nil, &got))
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("result %+v re-encoded: %+v, %v", got, again, err)
			}
		}
		if parts, err := SplitResultBatch(b); err == nil {
			for _, p := range parts {
				if len(p) == 0 {
					t.Errorf("batch %q split into an empty part", b)
				}
			}
		}
	})
}

func BenchmarkResultCodec(b *testing.B) {
	r := sampleResult()
	b.Run("binary", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf = AppendResult(buf[:0], &r)
			if _, err := ParseResult(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			buf, _ := json.Marshal(&r)
			var got Result
			if err := json.Unmarshal(buf, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A result's logs survive the binary form; without logs it is byte for
// byte what a leader before logs reads, and a line count its length
// cannot hold is refused.
func TestResultWithLogsRoundTrip(t *testing.T) {
	r := sampleResult()
	r.Logs = &Logs{Dropped: 3, Lines: []LogLine{
		{Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Level: "INFO", Message: "sent to=ada@example.com n=2"},
		{Time: time.Date(2026, 1, 2, 3, 4, 5, 7, time.UTC), Level: "ERROR", Message: "é"},
	}}
	b := AppendResultWithLogs(nil, &r)
	got, err := ParseResult(b)
	if err != nil {
		t.Fatalf("ParseResult: %v", err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
	}
	plain := r
	plain.Logs = nil
	if string(AppendResult(nil, &r)) != string(AppendResult(nil, &plain)) {
		t.Error("AppendResult wrote the logs")
	}
	if string(AppendResultWithLogs(nil, &plain)) != string(AppendResult(nil, &plain)) {
		t.Error("a result without logs is not its plain binary form")
	}
	batch := AppendResultBatchWithLogs(nil, []Result{r, plain})
	parts, err := SplitResultBatch(batch)
	if err != nil || len(parts) != 2 {
		t.Fatalf("SplitResultBatch: %d parts, %v", len(parts), err)
	}
	if got, err := ParseResult(parts[0]); err != nil || got.Logs == nil || len(got.Logs.Lines) != 2 {
		t.Errorf("batch result 0: %+v, %v", got.Logs, err)
	}
	for _, cut := range []int{1, 2, 5} {
		if _, err := ParseResult(b[:len(b)-cut]); err == nil {
			t.Errorf("a result with logs cut by %d bytes parsed", cut)
		}
	}
	huge := binary.AppendUvarint(binary.AppendUvarint(AppendResult(nil, &plain), 0), 1<<40)
	if _, err := ParseResult(huge); err == nil {
		t.Error("a line count of 2^40 in a few bytes parsed")
	}
}

func TestDeliveryForLogs(t *testing.T) {
	d := sampleDelivery()
	b := AppendDeliveryForLogs(nil, &d)
	if b[0] != LogsMagic || !IsBinary(b) {
		t.Fatalf("first byte %#x", b[0])
	}
	got, err := ParseDelivery(b)
	if err != nil || !reflect.DeepEqual(got, d) {
		t.Errorf("round trip: %+v, %v", got, err)
	}
}

// Bound keeps the newest lines within MaxAttemptLogBytes, counts the
// others, and cuts and cleans each line.
func TestLogsBound(t *testing.T) {
	var nilLogs *Logs
	nilLogs.Bound()
	line := LogLine{Level: "INFO", Message: "a\x00b"}
	l := &Logs{Dropped: -5}
	for range 200 {
		l.Lines = append(l.Lines, LogLine{Level: "INFO\x00", Message: "abc\xff" + strings.Repeat("a", MaxLogLineBytes)})
	}
	l.Lines = append(l.Lines, line, LogLine{Level: "VERYVERYLONGLEVELNAME", Message: string(make([]byte, 0))})
	l.Bound()
	size := 0
	for _, ln := range l.Lines {
		size += ln.Size()
		if len(ln.Level) > MaxLogLevelLen || len(ln.Message) > MaxLogLineBytes {
			t.Fatalf("line not cut: %d, %d", len(ln.Level), len(ln.Message))
		}
	}
	if size > MaxAttemptLogBytes || l.Dropped+int64(len(l.Lines)) != 202 || l.Dropped == 0 {
		t.Errorf("kept %d lines of %d bytes, dropped %d", len(l.Lines), size, l.Dropped)
	}
	if l.Lines[len(l.Lines)-2].Message != "ab" {
		t.Errorf("NUL not dropped: %q", l.Lines[len(l.Lines)-2].Message)
	}
	if last := l.Lines[len(l.Lines)-1]; last.Level != "VERYVERYLONGLEVE" {
		t.Errorf("newest line %+v not kept", last)
	}
	if first := l.Lines[0]; first.Level != "INFO" || first.Message[:6] != "abc\uFFFD" {
		t.Errorf("line not cleaned: %q %q", first.Level, first.Message[:8])
	}
}
