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
// these from the test's goroutine. A cond that sees the awaited state can
// no longer come (the job ended otherwise) returns GiveUp(err): the wait
// ends at once instead of at its deadline. Only tests and the harnesses
// they start servers with (redistest) import this package; it imports
// only the standard library.
package testwait

import (
	"errors"
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
// waiting for <what>: <err>" (or "gave up waiting for <what>: <err>" when
// cond returned GiveUp(err)).
func NoError(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	if err := poll(t, within, cond); err != nil {
		var g giveUp
		if errors.As(err, &g) {
			t.Fatalf("gave up waiting for %s: %v", what, g.err)
		}
		t.Fatalf("timed out after %v waiting for %s: %v", within, what, err)
	}
}

// Until is NoError for a caller that reports a time-out itself and goes
// on (t.Errorf and the next case): it polls cond the same way and returns
// nil once cond does, or cond's last error when within passes (err itself
// at once when cond returns GiveUp(err)).
func Until(t testing.TB, within time.Duration, cond func() error) error {
	err := poll(t, within, cond)
	var g giveUp
	if errors.As(err, &g) {
		return g.err
	}
	return err
}

// GiveUp is what cond returns when the awaited state can no longer come:
// NoError and Until stop polling at once, with err as cond's last error.
func GiveUp(err error) error { return giveUp{err} }

type giveUp struct{ err error }

func (g giveUp) Error() string { return g.err.Error() }
func (g giveUp) Unwrap() error { return g.err }

var errNotYet = fmt.Errorf("condition not met")

// poll calls cond until it returns nil, a GiveUp error, or within passes
// (or the test's context ends), and returns cond's last error in that
// case.
func poll(t testing.TB, within time.Duration, cond func() error) error {
	deadline := time.Now().Add(within)
	pause := firstPause
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if errors.As(err, new(giveUp)) {
			return err
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
