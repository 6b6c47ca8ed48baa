package builtin

import (
	"testing"
	"time"

	"github.com/dtsched/dts/worker"
)

func TestParseSleep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{`{"seconds": 2}`, 2 * time.Second, false},
		{`{"seconds": 0.25}`, 250 * time.Millisecond, false},
		{` 1.5 `, 1500 * time.Millisecond, false},
		{`0`, 0, false},
		{`{"seconds": 0}`, 0, false},
		{`{}`, 0, true},
		{`{"secs": 1}`, 0, true},
		{`{"seconds": "1"}`, 0, true},
		{`{"seconds": -1}`, 0, true},
		{`-0.5`, 0, true},
		{`1e300`, 0, true},
		{`null`, 0, true},
		{``, 0, true},
		{`abc`, 0, true},
		{`[1]`, 0, true},
	}
	for _, tt := range tests {
		got, err := parseSleep(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseSleep(%q) = %v, %v; want %v, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	h := register(t, Config{}).handler(t, "sleep")
	tests := []struct {
		name, payload string
		wantMS        int64
		permanent     bool
	}{
		{"object", `{"seconds": 0.01}`, 10, false},
		{"number", `0.002`, 2, false},
		{"string number", `"0.002"`, 2, false},
		{"string object", jsonString(`{"seconds": 0.002}`), 2, false},
		{"missing seconds", `{"ms": 5}`, 0, true},
		{"negative", `{"seconds": -1}`, 0, true},
		{"text", jsonString("sleep_task_1"), 0, true},
		{"null", `null`, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			res, err := h(t.Context(), newJob("sleep", tt.payload))
			if tt.permanent {
				if !worker.IsPermanent(err) {
					t.Errorf("err = %v, want a permanent error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := res.(map[string]any)["slept_ms"]; got != tt.wantMS {
				t.Errorf("slept_ms = %v, want %d", got, tt.wantMS)
			}
			if el := time.Since(start); el < time.Duration(tt.wantMS)*time.Millisecond {
				t.Errorf("returned after %v", el)
			}
		})
	}
}

func TestSleepCancel(t *testing.T) {
	t.Parallel()
	promptly(t, register(t, Config{}).handler(t, "sleep"), newJob("sleep", `{"seconds": 3600}`))
}

func TestFallback(t *testing.T) {
	t.Parallel()
	h := Fallback(Config{FallbackMin: time.Millisecond, FallbackMax: 3 * time.Millisecond})
	for i := range 20 {
		res, err := h(t.Context(), newJob("default", jsonString("valid_task_"+string(rune('a'+i)))))
		if err != nil {
			t.Fatal(err)
		}
		if ms := res.(map[string]any)["slept_ms"].(int64); ms < 1 || ms > 3 {
			t.Errorf("slept_ms = %d, want 1..3", ms)
		}
	}
}

func TestFallbackCancel(t *testing.T) {
	t.Parallel()
	h := Fallback(Config{FallbackMin: time.Hour, FallbackMax: 2 * time.Hour})
	promptly(t, h, newJob("test_job", jsonString("variable_task_batch1_1")))
}

func TestFallbackDelay(t *testing.T) {
	t.Parallel()
	const ms, s = time.Millisecond, time.Second
	tests := []struct {
		name     string
		lo, hi   time.Duration
		bucket   int
		u        float64
		expected time.Duration
	}{
		{"fast start", 100 * ms, 50 * s, 0, 0, 100 * ms},
		{"fast middle", 100 * ms, 50 * s, 0, 0.5, 550 * ms},
		{"medium start", 100 * ms, 50 * s, 1, 0, s},
		{"medium end", 100 * ms, 50 * s, 1, 1, 10 * s},
		{"slow middle", 100 * ms, 50 * s, 2, 0.5, 30 * s},
		{"slow end", 100 * ms, 50 * s, 2, 1, 50 * s},
		{"slow clamped to max", ms, 3 * ms, 2, 0.5, 3 * ms},
		{"medium clamped to max", ms, 3 * ms, 1, 0.1, 3 * ms},
		{"fast clamped to max", ms, 3 * ms, 0, 0.9, 3 * ms},
		{"fast clamped to min", 2 * s, 50 * s, 0, 0.5, 2 * s},
		{"min equals max", 5 * s, 5 * s, 1, 0.7, 5 * s},
	}
	for _, tt := range tests {
		if got := fallbackDelay(tt.lo, tt.hi, tt.bucket, tt.u); got != tt.expected {
			t.Errorf("%s: fallbackDelay = %v, want %v", tt.name, got, tt.expected)
		}
	}
}
