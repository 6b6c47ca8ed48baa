package queue_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/queue"
)

// malformed is input no decoder may accept: not JSON, the wrong JSON type,
// or JSON whose fields have the wrong types.
var malformed = []string{
	"",
	" ",
	"null",
	"{",
	"}",
	"[]",
	`"string"`,
	"1",
	"true",
	"{}",
	`{"job_id":"1"}`,
	`{"job_id":1e400}`,
	`{"job_id":1.5,"lease_token":1}`,
	`{"job_id":9223372036854775808,"lease_token":1}`,
	// Valid for every decoder but for a broken tail.
	validForAll[:len(validForAll)-1] + `,"payload":}`,
	validForAll + ` trailing`,
	validForAll + `{}`,
	validForAll[:len(validForAll)-1],
	"\xff\xfe\xfd",
	strings.Repeat("[", 100_000),
	strings.Repeat(`{"a":`, 20_000),
}

// validForAll is accepted by all three decoders (each ignores the others' fields).
const validForAll = `{"job_id":1,"lease_token":1,"name":"n","outcome":"completed","worker_id":"w","concurrency":1}`

func TestDecodeRejectsMalformed(t *testing.T) {
	t.Parallel()
	for _, in := range malformed {
		if _, err := queue.DecodeDelivery([]byte(in)); err == nil {
			t.Errorf("DecodeDelivery(%.60q) accepted", in)
		}
		if _, err := queue.DecodeResult([]byte(in)); err == nil {
			t.Errorf("DecodeResult(%.60q) accepted", in)
		}
		if _, err := queue.DecodeHeartbeat([]byte(in)); err == nil {
			t.Errorf("DecodeHeartbeat(%.60q) accepted", in)
		}
	}
	if _, err := queue.DecodeDelivery(nil); err == nil {
		t.Error("DecodeDelivery(nil) accepted")
	}
	// The base really is valid, so each rejection above is the tail's doing.
	if _, err := queue.DecodeDelivery([]byte(validForAll)); err != nil {
		t.Errorf("DecodeDelivery(validForAll): %v", err)
	}
	if _, err := queue.DecodeResult([]byte(validForAll)); err != nil {
		t.Errorf("DecodeResult(validForAll): %v", err)
	}
	if _, err := queue.DecodeHeartbeat([]byte(validForAll)); err != nil {
		t.Errorf("DecodeHeartbeat(validForAll): %v", err)
	}
}

func TestDecodeDelivery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		ok bool
	}{
		{`{"job_id":1,"lease_token":2,"name":"n"}`, true},
		{`{"job_id":1,"lease_token":2,"name":"n","payload":{"a":[1,2]},"attempt":3,"max_retries":4,"created_at":"2024-01-02T03:04:05Z"}`, true},
		{`{"job_id":0,"lease_token":2,"name":"n"}`, false},
		{`{"job_id":-1,"lease_token":2,"name":"n"}`, false},
		{`{"job_id":1,"lease_token":0,"name":"n"}`, false},
		{`{"job_id":1,"lease_token":-5,"name":"n"}`, false},
		{`{"job_id":1,"lease_token":2,"name":""}`, false},
		{`{"job_id":1,"lease_token":2}`, false},
		{`{"job_id":1,"lease_token":2,"name":"n","created_at":"yesterday"}`, false},
		{`{"job_id":1,"lease_token":2,"name":"n","created_at":"2024-13-01T00:00:00Z"}`, false},
		{`{"job_id":1,"lease_token":2,"name":7}`, false},
		{`{"job_id":1,"lease_token":2,"name":"n","attempt":"1"}`, false},
	}
	for _, tt := range tests {
		d, err := queue.DecodeDelivery([]byte(tt.in))
		if (err == nil) != tt.ok {
			t.Errorf("DecodeDelivery(%s) = %+v, %v; want ok %v", tt.in, d, err, tt.ok)
		}
	}
	d, err := queue.DecodeDelivery([]byte(tests[1].in))
	if err != nil || d.JobID != 1 || d.LeaseToken != 2 || d.Name != "n" || d.Attempt != 3 || d.MaxRetries != 4 ||
		string(d.Payload) != `{"a":[1,2]}` || d.CreatedAt.Year() != 2024 {
		t.Errorf("decoded %+v, %v", d, err)
	}
}

func TestDecodeResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		ok bool
	}{
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"completed"}`, true},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"completed","result":{"x":1}}`, true},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"completed","result":null}`, true},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"failed","error":"e","reason":"permanent"}`, true},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"released"}`, true},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"progress","progress":40,"message":"rows 4/10"}`, true},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"progress"}`, true},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"progress","progress":101}`, false},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"progress","progress":-1}`, false},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"progress","message":"a\u0007"}`, false},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"Completed"}`, false},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":""}`, false},
		{`{"job_id":1,"lease_token":2}`, false},
		{`{"job_id":0,"lease_token":2,"outcome":"completed"}`, false},
		{`{"job_id":1,"lease_token":0,"outcome":"completed"}`, false},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"completed","result":}`, false},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"completed","started_at":5}`, false},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":"completed","error":["e"]}`, false},
		{`{"job_id":1,"lease_token":2,"worker_id":"w","outcome":7}`, false},
		// The reporting worker's id passes the same checks as in a heartbeat.
		{`{"job_id":1,"lease_token":2,"outcome":"completed"}`, false},
		{`{"job_id":1,"lease_token":2,"worker_id":"w\u0000x","outcome":"completed"}`, false},
		{`{"job_id":1,"lease_token":2,"worker_id":"w\u0007","outcome":"completed"}`, false},
	}
	for _, tt := range tests {
		r, err := queue.DecodeResult([]byte(tt.in))
		if (err == nil) != tt.ok {
			t.Errorf("DecodeResult(%s) = %+v, %v; want ok %v", tt.in, r, err, tt.ok)
		}
	}
}

func TestDecodeHeartbeat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		ok bool
	}{
		{`{"worker_id":"w","concurrency":1}`, true},
		{`{"worker_id":"w","concurrency":100000,"job_types":["*"],"in_flight":[{"job_id":1,"lease_token":2}],"draining":true}`, true},
		{`{"worker_id":"` + strings.Repeat("w", 200) + `","concurrency":1}`, true},
		{`{"worker_id":"` + strings.Repeat("w", 201) + `","concurrency":1}`, false},
		{`{"worker_id":"","concurrency":1}`, false},
		{`{"concurrency":1}`, false},
		{`{"worker_id":"w","concurrency":0}`, false},
		{`{"worker_id":"w","concurrency":-1}`, false},
		{`{"worker_id":"w","concurrency":100001}`, false},
		{`{"worker_id":"w","concurrency":1,"in_flight":{}}`, false},
		{`{"worker_id":"w","concurrency":1,"job_types":"*"}`, false},
		{`{"worker_id":"w","concurrency":1,"sent_at":5}`, false},
		{`{"worker_id":"w","concurrency":1,"draining":"yes"}`, false},
		{`{"worker_id":"w","concurrency":1.5}`, false},
		// A control character in an id or a job type would fail every
		// claim of its group (PostgreSQL refuses a NUL in text): refused
		// here, where one bad heartbeat costs only itself.
		{`{"worker_id":"w\u0000","concurrency":1}`, false},
		{`{"worker_id":"w\n","concurrency":1}`, false},
		{`{"worker_id":"w","concurrency":1,"job_types":["ok","bad\u0000"]}`, false},
		{`{"worker_id":"w","concurrency":1,"job_types":["\u001b[31m"]}`, false},
		{`{"worker_id":"w","concurrency":1,"job_types":[""]}`, false},
		{`{"worker_id":"w","concurrency":1,"job_types":["` + strings.Repeat("t", 129) + `"]}`, false},
		{`{"worker_id":"w","concurrency":1,"job_types":["` + strings.Repeat("t", 128) + `","*"]}`, true},
		{`{"worker_id":"w","concurrency":1,"in_flight":[{"job_id":1,"lease_token":0}]}`, false},
	}
	for _, tt := range tests {
		hb, err := queue.DecodeHeartbeat([]byte(tt.in))
		if (err == nil) != tt.ok {
			t.Errorf("DecodeHeartbeat(%.80s) = %+v, %v; want ok %v", tt.in, hb, err, tt.ok)
		}
	}
}

// addSeeds adds the small malformed inputs to a fuzz target's corpus
// (testdata/fuzz/<target> holds the valid-looking seeds).
func addSeeds(f *testing.F) {
	for _, s := range malformed {
		if len(s) < 1000 {
			f.Add([]byte(s))
		}
	}
}

// roundTrip checks what a fuzz target demands of a value its decoder
// accepted: it encodes, the encoding decodes again, and encoding that gives
// the same bytes (encoding is a fixed point after one trip).
func roundTrip[T any](t *testing.T, in []byte, v T, decode func([]byte) (T, error)) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("accepted %q but cannot encode %+v: %v", in, v, err)
	}
	v2, err := decode(b)
	if err != nil {
		t.Fatalf("accepted %q but rejects its own encoding %s: %v", in, b, err)
	}
	b2, err := json.Marshal(v2)
	if err != nil {
		t.Fatalf("cannot encode %+v: %v", v2, err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatalf("encoding is not stable for %q:\n%s\n%s", in, b, b2)
	}
}

func FuzzDecodeDelivery(f *testing.F) {
	addSeeds(f)
	f.Add([]byte(`{"job_id":1,"lease_token":2,"name":"n","payload":{"a":[1, 2]},"created_at":"2024-01-02T03:04:05.123+02:00"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := queue.DecodeDelivery(b)
		if err != nil {
			return
		}
		if d.JobID <= 0 || d.LeaseToken <= 0 || d.Name == "" {
			t.Fatalf("accepted %q with missing fields: %+v", b, d)
		}
		roundTrip(t, b, d, queue.DecodeDelivery)
	})
}

func FuzzDecodeResult(f *testing.F) {
	addSeeds(f)
	f.Add([]byte(`{"job_id":1,"lease_token":2,"outcome":"completed","result":{"x": [1, "\u00e9"]},"started_at":"2024-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"job_id":1,"lease_token":2,"outcome":"failed","error":"boom","reason":"timeout"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := queue.DecodeResult(b)
		if err != nil {
			return
		}
		if r.JobID <= 0 || r.LeaseToken <= 0 {
			t.Fatalf("accepted %q with missing fields: %+v", b, r)
		}
		if len(r.Result) > 0 && !json.Valid(r.Result) {
			t.Fatalf("accepted %q with a result that is not JSON", b)
		}
		roundTrip(t, b, r, queue.DecodeResult)
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	addSeeds(f)
	f.Add([]byte(`{"worker_id":"w","concurrency":3,"job_types":["a","*"],"in_flight":[{"job_id":1,"lease_token":2}],"stopped":true,"sent_at":"2024-01-02T03:04:05Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		hb, err := queue.DecodeHeartbeat(b)
		if err != nil {
			return
		}
		if hb.WorkerID == "" || len(hb.WorkerID) > 200 || hb.Concurrency < 1 || hb.Concurrency > 100_000 {
			t.Fatalf("accepted %q with bad fields: %+v", b, hb)
		}
		roundTrip(t, b, hb, queue.DecodeHeartbeat)
	})
}
