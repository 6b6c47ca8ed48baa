package job

import (
	"math"
	"time"
)

// Backoff computes the delay before a failed job's next attempt:
// exponential in the attempt number, capped, then reduced by a random share
// of up to Jitter so that jobs failing together do not retry together.
type Backoff struct {
	Base   time.Duration // delay after the first failed attempt; default 1s
	Cap    time.Duration // largest delay; default 5m
	Jitter float64       // share of the delay that is random, 0..1; default 0.5
}

// DefaultBackoff is the backoff used when none is configured.
var DefaultBackoff = Backoff{Base: time.Second, Cap: 5 * time.Minute, Jitter: 0.5}

// WithDefaults fills zero fields from DefaultBackoff.
func (b Backoff) WithDefaults() Backoff {
	if b.Base <= 0 {
		b.Base = DefaultBackoff.Base
	}
	if b.Cap <= 0 {
		b.Cap = DefaultBackoff.Cap
	}
	if b.Jitter < 0 || b.Jitter > 1 {
		b.Jitter = DefaultBackoff.Jitter
	}
	return b
}

// Delay returns the wait after failed attempt number attempt (1-based), with
// r a uniform random number in [0, 1). The result lies in
// [d*(1-Jitter), d] where d = min(Cap, Base*2^(attempt-1)).
func (b Backoff) Delay(attempt int, r float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := float64(b.Base) * math.Pow(2, float64(attempt-1))
	if d > float64(b.Cap) || math.IsInf(d, 0) {
		d = float64(b.Cap)
	}
	return time.Duration(d * (1 - b.Jitter*r))
}

// Exhausted reports whether a job that has used attempts attempts (the one
// that just failed included) and allows maxRetries retries must stop
// retrying. max_retries 3 means 4 attempts in all.
func Exhausted(attempts, maxRetries int) bool {
	return attempts > maxRetries
}
