package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

func TestNormalizePayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		want  string // compacted payload; "" when refused
		err   string // the refusal contains this
		limit int    // MaxPayloadBytes; 0 for 1 MiB
	}{
		{``, `null`, "", 0},
		{`null`, `null`, "", 0},
		{` { "a" : [ 1 , 2 ] } `, `{"a":[1,2]}`, "", 0},
		{`"x"`, `"x"`, "", 0},
		{`"\\u0000"`, `"\\u0000"`, "", 0}, // an escaped backslash, then "u0000": fine
		{`"\u0001\n\t"`, `"\u0001\n\t"`, "", 0},
		{`"\ud83d\ude00"`, `"\ud83d\ude00"`, "", 0},
		{`"\u0000"`, "", `\u0000`, 0},
		{`{"k\u0000":1}`, "", `\u0000`, 0},
		{`"\ud800"`, "", "surrogate", 0},
		{`"\ud800\n"`, "", "surrogate", 0},
		{`"\ud800\u0041"`, "", "surrogate", 0},
		{`"\udfff"`, "", "surrogate", 0},
		{"\"\xc3\x28\"", "", "UTF-8", 0},
		{`1e131071`, `1e131071`, "", 0},
		{`1e131072`, "", "out of range", 0},
		{`-1.5e-16381`, `-1.5e-16381`, "", 0},
		{`1e-16384`, "", "out of range", 0},
		{`0.` + strings.Repeat("0", 16383), `0.` + strings.Repeat("0", 16383), "", 0},
		{`0.` + strings.Repeat("0", 16384), "", "out of range", 0},
		{`1e99999999999999999999`, "", "out of range", 0},
		{strings.Repeat("[", job.MaxJSONDepth) + strings.Repeat("]", job.MaxJSONDepth), strings.Repeat("[", job.MaxJSONDepth) + strings.Repeat("]", job.MaxJSONDepth), "", 0},
		{strings.Repeat(`{"a":`, job.MaxJSONDepth+1) + "1" + strings.Repeat("}", job.MaxJSONDepth+1), "", "nested deeper", 0},
		{`"` + strings.Repeat("x", 98) + `"`, `"` + strings.Repeat("x", 98) + `"`, "", 100}, // exactly the limit
		{`"` + strings.Repeat("x", 99) + `"`, "", "101 bytes", 100},
		{`1e95`, `1e95`, "", 100},    // counted as 96 digits, plus 2 for a sign and a point
		{`[1e97]`, "", "bytes", 100}, // 98 + 2 + the brackets
	}
	for _, tt := range tests {
		limit := tt.limit
		if limit == 0 {
			limit = 1 << 20
		}
		got, err := job.NormalizeJSON(json.RawMessage(tt.in), limit)
		switch {
		case tt.want == "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("job.NormalizeJSON(%.60q) = %.60s, %v; want an error containing %q", tt.in, got, err, tt.err)
		case tt.want != "" && (err != nil || string(got) != tt.want):
			t.Errorf("job.NormalizeJSON(%.60q) = %.60s, %v; want %.60s", tt.in, got, err, tt.want)
		}
	}
}

func TestDecodeSubmitDefaults(t *testing.T) {
	t.Parallel()
	p, err := decodeSubmit([]byte(`{"name":"a"}`), "hdr-key", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "a" || p.Queue != "default" || p.MaxRetries != 3 || p.Priority != 0 || string(p.Payload) != "null" ||
		p.RunAt != nil || p.Delay != 0 || p.IdempotencyKey != "hdr-key" {
		t.Errorf("params = %+v", p)
	}
}

func TestDecodeBatchForms(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`[{"name":"a"},{"type":"b"}]`, ` {"jobs":[{"name":"a"},{"type":"b"}]}`} {
		ps, err := decodeBatch([]byte(body), 1<<20)
		if err != nil || len(ps) != 2 || ps[0].Name != "a" || ps[1].Name != "b" {
			t.Errorf("decodeBatch(%s) = %+v, %v", body, ps, err)
		}
	}
}

// FuzzSubmitDecode checks that decoding and validating a submission never
// panics, refuses with a 400 *httpx.Error, and accepts only what the store
// can take. Seeds are in testdata/fuzz/FuzzSubmitDecode.
func FuzzSubmitDecode(f *testing.F) {
	f.Add([]byte(`{"name":"email","payload":{"to":"a@b.c"},"priority":5,"max_retries":2,"run_at":"2030-01-02T03:04:05Z"}`), "")
	f.Add([]byte(`{"type":"x","payload":"\ud83d\ude00","delay_seconds":10,"idempotency_key":"k"}`), "k")
	f.Add([]byte(`[{"name":"a"},{"name":"b","payload":[1e5,-0.5]}]`), "")
	f.Add([]byte(`{"jobs":[{"name":"a","queue":"q.1:x-y_z"}]}`), "")
	// Bodies the one-pass decode of a batch refuses or must not take.
	f.Add([]byte(`[{"name":"a"},null]`), "")
	f.Add([]byte(`{"jobs":[{"name":"a","x":1}],"callback":{"name":"c","depends_on":[1]}}`), "")
	f.Add([]byte(`{"jobs":[{"name":5}],"callback":7}`), "")
	f.Add([]byte(`{"jobs":null,"callback":{"name":"c"}}`), "")
	f.Add([]byte(`{"jobs":[{"name":"a","unique_for":"x"},{"name":"b","depends_on_index":[0]}],"callback":null}`), "")
	const maxPayload = 4096
	f.Fuzz(func(t *testing.T, body []byte, headerKey string) {
		p, err := decodeSubmit(body, headerKey, maxPayload)
		if err != nil {
			checkRefusal(t, err)
		} else {
			checkParams(t, p.Name, p.Queue, p.Priority, p.MaxRetries, p.TimeoutSeconds, p.IdempotencyKey, p.Payload, maxPayload)
			if p.Delay < 0 || p.Delay.Seconds() > maxDelaySeconds || (p.RunAt != nil && p.Delay != 0) {
				t.Errorf("delay %v run_at %v", p.Delay, p.RunAt)
			}
		}
		ps, err := decodeBatch(body, maxPayload)
		slow, serr := decodeBatchSlow(body, maxPayload)
		if fmt.Sprint(err) != fmt.Sprint(serr) || !reflect.DeepEqual(ps, slow) {
			t.Fatalf("decodeBatch and decodeBatchSlow disagree:\n%+v, %v\n%+v, %v", ps, err, slow, serr)
		}
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if len(ps) == 0 || len(ps) > maxBatchJobs {
			t.Errorf("batch of %d jobs accepted", len(ps))
		}
		for _, p := range ps {
			checkParams(t, p.Name, p.Queue, p.Priority, p.MaxRetries, p.TimeoutSeconds, p.IdempotencyKey, p.Payload, maxPayload)
		}
	})
}

func checkRefusal(t *testing.T, err error) {
	t.Helper()
	var e *httpx.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code == "" || e.Message == "" {
		t.Fatalf("refusal %#v is not a 400 *httpx.Error", err)
	}
}

func checkParams(t *testing.T, name, queue string, prio, retries, timeout int, key string, payload []byte, maxPayload int) {
	t.Helper()
	const maxIdempotencyLen = 200 // app.CheckIdempotencyKey's bound
	if name == "" || utf8.RuneCountInString(name) > maxNameLen || !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		t.Errorf("name %q accepted", name)
	}
	if !wire.ValidQueueName(queue) {
		t.Errorf("queue %q accepted", queue)
	}
	if prio < minPriority || prio > maxPriority || retries < 0 || retries > maxMaxRetries || timeout < 0 || timeout > maxTimeoutSeconds {
		t.Errorf("priority %d max_retries %d timeout %d accepted", prio, retries, timeout)
	}
	if utf8.RuneCountInString(key) > maxIdempotencyLen || strings.IndexFunc(key, unicode.IsControl) >= 0 || !utf8.ValidString(key) {
		t.Errorf("idempotency key %q accepted", key)
	}
	if !json.Valid(payload) || len(payload) > maxPayload || !utf8.Valid(payload) {
		t.Errorf("payload %.80q accepted", payload)
	}
	if strings.Contains(string(payload), `\u0000`) && !strings.Contains(string(payload), `\\u0000`) {
		t.Errorf("payload with \\u0000 accepted: %.80q", payload)
	}
}

// BenchmarkDecodeBatch: a batch of 1,000 jobs as the bench and the stress
// scripts post them.
func BenchmarkDecodeBatch(b *testing.B) {
	benchDecodeBatch(b, `{"name":"noop","payload":{"n":12345,"s":"some text of the job"},"max_retries":3}`, 1000)
}

// BenchmarkDecodeBatchLarge: the largest batch of 1 MiB payloads that fits
// the 16 MiB body limit (bench -payload-bytes 1048576).
func BenchmarkDecodeBatchLarge(b *testing.B) {
	payload := `"` + strings.Repeat("abcdefghijklmnopqrstuvwxyz012345", (1<<20-2)/32) + `"`
	benchDecodeBatch(b, `{"name":"noop","payload":`+payload+`}`, 15)
}

// benchDecodeBatch decodes a {"jobs": [...]} batch of n copies of job.
func benchDecodeBatch(b *testing.B, job string, n int) {
	body := []byte(`{"jobs":[` + strings.Repeat(job+",", n-1) + job + `]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeBatch(body, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}
