package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/retry"
	"github.com/dtsched/dts/worker"
)

// sleep waits the number of seconds in its payload: {"seconds": n} or a bare
// number n (either may also arrive as a JSON string). Result: {"slept_ms": n}.
func sleep(ctx context.Context, job *worker.Job) (any, error) {
	if invalid(job) {
		return nil, ErrInvalidJob
	}
	d, err := parseSleep(job.PayloadString())
	if err != nil {
		return nil, worker.Permanent(fmt.Errorf("sleep: %w", err))
	}
	if err := retry.Sleep(ctx, d); err != nil {
		return nil, err
	}
	return map[string]any{"slept_ms": d.Milliseconds()}, nil
}

const maxSleepSeconds = float64(math.MaxInt64 / int64(time.Second))

func parseSleep(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var secs *float64
	if strings.HasPrefix(s, "{") {
		var p struct {
			Seconds *float64 `json:"seconds"`
		}
		if err := json.Unmarshal([]byte(s), &p); err != nil {
			return 0, fmt.Errorf(`payload must be {"seconds": n} or a number: %w`, err)
		}
		secs = p.Seconds
	} else if err := json.Unmarshal([]byte(s), &secs); err != nil {
		return 0, fmt.Errorf(`payload must be {"seconds": n} or a number: %w`, err)
	}
	switch {
	case secs == nil:
		return 0, errors.New(`payload must be {"seconds": n} or a number`)
	case *secs < 0 || *secs > maxSleepSeconds:
		return 0, fmt.Errorf("seconds out of range: %v", *secs)
	}
	return time.Duration(*secs * float64(time.Second)), nil
}

// Fallback returns the simulated-work handler of the original's "default"
// and "test_job" names (Register installs it under FallbackNames). Like the
// original worker's simulate_variable_work, it picks fast, medium or slow
// with equal chance and sleeps uniformly within [FallbackMin, 1s), [1s, 10s)
// or [10s, FallbackMax) respectively, clamped into [FallbackMin,
// FallbackMax], returning early with ctx.Err() when ctx is done.
// Result: {"slept_ms": n}.
func Fallback(cfg Config) worker.HandlerFunc {
	cfg = cfg.WithDefaults()
	lo, hi := cfg.FallbackMin, cfg.FallbackMax
	return func(ctx context.Context, job *worker.Job) (any, error) {
		if invalid(job) {
			return nil, ErrInvalidJob
		}
		d := fallbackDelay(lo, hi, rand.IntN(3), rand.Float64())
		if err := retry.Sleep(ctx, d); err != nil {
			return nil, err
		}
		return map[string]any{"slept_ms": d.Milliseconds()}, nil
	}
}

// fallbackDelay is the fallback's sleep for bucket 0 (fast), 1 (medium) or 2
// (slow) and u in [0, 1).
func fallbackDelay(lo, hi time.Duration, bucket int, u float64) time.Duration {
	from, to := lo, time.Second
	switch bucket {
	case 1:
		from, to = time.Second, 10*time.Second
	case 2:
		from, to = 10*time.Second, hi
	}
	d := from + time.Duration(u*float64(to-from))
	return max(lo, min(d, hi))
}
