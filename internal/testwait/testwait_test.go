package testwait_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dtsched/dts/internal/testwait"
)

// fatalTB records a Fatalf and stops the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fails runs fn with a fatalTB on its own goroutine and returns what it
// failed with ("" if it did not).
func fails(t *testing.T, fn func(tb testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.msg
}

func TestForReturnsOnceCondHolds(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	msg := fails(t, func(tb testing.TB) {
		testwait.For(tb, 5*time.Second, "three calls", func() bool { return calls.Add(1) == 3 })
	})
	if msg != "" {
		t.Fatalf("For failed: %s", msg)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("cond called %d times, want 3 (never again once it holds)", n)
	}
}

func TestForFailsAtDeadlineNamingWhat(t *testing.T) {
	t.Parallel()
	start := time.Now()
	msg := fails(t, func(tb testing.TB) {
		testwait.For(tb, 100*time.Millisecond, "a state never reached", func() bool { return false })
	})
	took := time.Since(start)
	if want := "timed out after 100ms waiting for a state never reached"; msg != want {
		t.Fatalf("failed with %q, want %q", msg, want)
	}
	if took < 100*time.Millisecond || took > 2*time.Second {
		t.Fatalf("gave up after %v, want about 100ms", took)
	}
}

func TestNoErrorFailsWithLastError(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	msg := fails(t, func(tb testing.TB) {
		testwait.NoError(tb, 50*time.Millisecond, "the row", func() error {
			return fmt.Errorf("attempt %d: %w", calls.Add(1), errors.New("no row"))
		})
	})
	want := fmt.Sprintf("timed out after 50ms waiting for the row: attempt %d: no row", calls.Load())
	if msg != want {
		t.Fatalf("failed with %q, want %q", msg, want)
	}
	if calls.Load() < 2 {
		t.Fatalf("cond called %d times in 50ms, want several", calls.Load())
	}
}

func TestNoErrorReturnsOnNil(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	msg := fails(t, func(tb testing.TB) {
		testwait.NoError(tb, 5*time.Second, "second call", func() error {
			if calls.Add(1) < 2 {
				return errors.New("first")
			}
			return nil
		})
	})
	if msg != "" || calls.Load() != 2 {
		t.Fatalf("failed with %q after %d calls, want success after 2", msg, calls.Load())
	}
}

func TestUntilReturnsLastError(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	err := testwait.Until(t, 30*time.Millisecond, func() error { return fmt.Errorf("attempt %d", calls.Add(1)) })
	if want := fmt.Sprintf("attempt %d", calls.Load()); err == nil || err.Error() != want {
		t.Fatalf("Until = %v, want %s", err, want)
	}
	if err := testwait.Until(t, time.Second, func() error { return nil }); err != nil {
		t.Fatalf("Until of a condition that holds = %v", err)
	}
}

// A cond that returns GiveUp ends the wait at once, long before its
// deadline, with the error it wrapped.
func TestGiveUpEndsTheWaitAtOnce(t *testing.T) {
	t.Parallel()
	ended := errors.New("the job failed")
	var calls atomic.Int32
	cond := func() error {
		if calls.Add(1) < 3 {
			return errors.New("still running")
		}
		return testwait.GiveUp(ended)
	}
	start := time.Now()
	if err := testwait.Until(t, time.Minute, cond); err != ended {
		t.Fatalf("Until = %v, want the error GiveUp wrapped", err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("cond called %d times, want 3 (never again after GiveUp)", n)
	}
	calls.Store(0)
	msg := fails(t, func(tb testing.TB) { testwait.NoError(tb, time.Minute, "the job to complete", cond) })
	if want := "gave up waiting for the job to complete: the job failed"; msg != want {
		t.Fatalf("NoError failed with %q, want %q", msg, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("gave up after %v, want at once", d)
	}
}

// A state already reached costs no wait: the first call comes at once.
func TestForFirstCallImmediate(t *testing.T) {
	t.Parallel()
	start := time.Now()
	testwait.For(t, time.Second, "true", func() bool { return true })
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Fatalf("a condition that holds took %v", d)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
