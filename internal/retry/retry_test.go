package retry

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	t.Parallel()
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	if err := Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep(0): %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with an ended context: %v, want context.Canceled", err)
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(0) with an ended context: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Sleep with an ended context took %s", d)
	}
}

func TestConnectRetriesUntilOpen(t *testing.T) {
	t.Parallel()
	tries := 0
	v, err := Connect(context.Background(), slog.New(slog.DiscardHandler), "test", time.Minute,
		func(context.Context) (int, error) {
			if tries++; tries < 3 {
				return 0, errors.New("not yet")
			}
			return 42, nil
		})
	if err != nil || v != 42 || tries != 3 {
		t.Fatalf("Connect = %d, %v after %d tries; want 42, nil after 3", v, err, tries)
	}
}

func TestConnectGivesUp(t *testing.T) {
	t.Parallel()
	errDown := errors.New("down")
	open := func(context.Context) (int, error) { return 0, errDown }
	start := time.Now()
	_, err := Connect(context.Background(), slog.New(slog.DiscardHandler), "test", 300*time.Millisecond, open)
	if !errors.Is(err, errDown) {
		t.Fatalf("Connect: %v, want it to wrap %v", err, errDown)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Connect gave up after %s, want about 300ms", d)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Connect(ctx, slog.New(slog.DiscardHandler), "test", time.Hour, open); !errors.Is(err, errDown) {
		t.Fatalf("Connect with an ended context: %v, want it to wrap %v", err, errDown)
	}
}
