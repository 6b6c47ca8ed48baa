// Package retry holds the two waits that the services, the worker library
// and the benchmark share: Sleep, a pause that ends early when its context
// does, and Connect, the start-up loop of a main that waits for PostgreSQL
// or Redis to come up.
//
// What must stay true: nothing here outlives or ignores its context (a
// SIGTERM during a wait ends it at once), and the package imports the
// standard library only, so that the worker library stays light.
package retry

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Sleep waits d or until ctx ends, whichever is first. It returns ctx.Err()
// if ctx ended first (or had already ended), nil otherwise. A d of zero or
// less does not wait.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Connect delays between failed tries: the first, doubling up to the last.
const (
	ConnectFirstDelay = 250 * time.Millisecond
	ConnectMaxDelay   = 4 * time.Second
)

// Connect calls open until it succeeds, for up to timeout, and returns what
// it opened. Between tries it logs a warning that it is waiting for what
// (such as "PostgreSQL and Redis") and sleeps ConnectFirstDelay, doubling up
// to ConnectMaxDelay. open gets a context that ends with ctx or the
// timeout; it should bound one try itself if one can hang. When time runs
// out, or ctx ends, the error wraps open's last.
func Connect[T any](ctx context.Context, log *slog.Logger, what string, timeout time.Duration,
	open func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	delay := ConnectFirstDelay
	for {
		v, err := open(ctx)
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil {
			return v, fmt.Errorf("gave up connecting after %s: %w", timeout, err)
		}
		log.WarnContext(ctx, "waiting for "+what, "error", err, "retry_in", delay.String())
		if Sleep(ctx, delay) != nil {
			return v, fmt.Errorf("gave up connecting after %s: %w", timeout, err)
		}
		delay = min(delay*2, ConnectMaxDelay)
	}
}
