package job

import (
	"testing"
	"time"
)

func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: time.Second, Cap: 30 * time.Second, Jitter: 0.5}
	cases := []struct {
		attempt  int
		min, max time.Duration
	}{
		{0, 500 * time.Millisecond, time.Second},
		{1, 500 * time.Millisecond, time.Second},
		{2, time.Second, 2 * time.Second},
		{3, 2 * time.Second, 4 * time.Second},
		{5, 8 * time.Second, 16 * time.Second},
		{6, 15 * time.Second, 30 * time.Second},
		{60, 15 * time.Second, 30 * time.Second},
		{5000, 15 * time.Second, 30 * time.Second},
	}
	for _, c := range cases {
		for _, r := range []float64{0, 0.25, 0.5, 0.999999} {
			d := b.Delay(c.attempt, r)
			if d < c.min || d > c.max {
				t.Errorf("Delay(%d, %v) = %v, want within [%v, %v]", c.attempt, r, d, c.min, c.max)
			}
		}
		if got := b.Delay(c.attempt, 0); got != c.max {
			t.Errorf("Delay(%d, 0) = %v, want the full delay %v", c.attempt, got, c.max)
		}
	}
}

func TestBackoffNoJitterIsExact(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: 100 * time.Millisecond, Cap: time.Second, Jitter: 0}
	if got := b.Delay(3, 0.7); got != 400*time.Millisecond {
		t.Fatalf("Delay(3) = %v, want 400ms", got)
	}
}

func TestBackoffWithDefaults(t *testing.T) {
	t.Parallel()
	if got := (Backoff{Jitter: 2}).WithDefaults(); got != DefaultBackoff {
		t.Fatalf("WithDefaults() = %+v, want %+v", got, DefaultBackoff)
	}
}

func TestExhausted(t *testing.T) {
	t.Parallel()
	cases := []struct {
		attempts, maxRetries int
		want                 bool
	}{{1, 3, false}, {3, 3, false}, {4, 3, true}, {1, 0, true}, {0, 0, false}}
	for _, c := range cases {
		if got := Exhausted(c.attempts, c.maxRetries); got != c.want {
			t.Errorf("Exhausted(%d, %d) = %v, want %v", c.attempts, c.maxRetries, got, c.want)
		}
	}
}
