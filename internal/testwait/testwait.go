// Package testwait is the one way a test waits for a state the code under
// test reaches asynchronously: poll a condition with a short backoff until
// it holds or a deadline passes, then fail saying what was awaited and,
// for NoError, the condition's last error (Until returns it instead).
//
// A fixed sleep is either too short on a loaded machine (a flake) or too
// long everywhere else (a slow suite); a bounded poll is neither. Wait on a
// channel or a test signal when the code offers one; poll with this when
// the only signal is state (a row, a key, an HTTP answer).
//
// What must stay true: cond is called first at once (a state already
// reached costs no wait), always on the caller's goroutine, and never
// again after For or NoError returns. The failure is t.Fatalf, so call
// these from the test's goroutine. Only _test.go files import this
// package; it imports only the standard library.
package testwait

import (
	"fmt"
	"testing"
	"time"
)

const (
	firstPause = time.Millisecond
	maxPause   = 25 * time.Millisecond // how late a poll may notice a state
)

// For calls cond until it returns true, and fails t if within passes
// first: "timed out after <within> waiting for <what>".
func For(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := poll(t, within, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}); err != nil {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// NoError calls cond until it returns nil, and fails t if within passes
// first, with the last error cond returned: "timed out after <within>
// waiting for <what>: <err>".
func NoError(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	if err := poll(t, within, cond); err != nil {
		t.Fatalf("timed out after %v waiting for %s: %v", within, what, err)
	}
}

// Until is NoError for a caller that reports a time-out itself and goes
// on (t.Errorf and the next case): it polls cond the same way and returns
// nil once cond does, or cond's last error when within passes.
func Until(t testing.TB, within time.Duration, cond func() error) error {
	return poll(t, within, cond)
}

var errNotYet = fmt.Errorf("condition not met")

// poll calls cond until it returns nil or within passes (or the test's
// context ends), and returns cond's last error in that case.
func poll(t testing.TB, within time.Duration, cond func() error) error {
	deadline := time.Now().Add(within)
	pause := firstPause
	for {
		err := cond()
		if err == nil {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return err
		}
		select {
		case <-time.After(min(pause, left)):
		case <-t.Context().Done():
			return fmt.Errorf("%w (the test ended)", err)
		}
		pause = min(2*pause, maxPause)
	}
}
