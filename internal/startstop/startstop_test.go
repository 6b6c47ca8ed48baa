package startstop_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/startstop/startstoptest"
)

func TestLoopStopWaitsForRun(t *testing.T) {
	var l startstop.Loop
	l.Stop() // before any start: nothing to do
	entered, returned := make(chan struct{}), atomic.Bool{}
	if !l.StartLoop(context.Background(), func(ctx context.Context) {
		close(entered)
		<-ctx.Done()
		returned.Store(true)
	}) {
		t.Fatal("a new loop did not start")
	}
	<-entered
	if l.StartLoop(context.Background(), func(context.Context) { t.Error("a second run started while the first runs") }) {
		t.Error("StartLoop on a running loop reported a start")
	}
	l.Stop()
	if !returned.Load() {
		t.Fatal("Stop returned before the loop did")
	}
	l.Stop() // idempotent
	select {
	case <-l.Done():
	default:
		t.Fatal("Done is not closed after Stop")
	}

	// A stopped loop starts again.
	again := make(chan struct{})
	l.StartLoop(context.Background(), func(ctx context.Context) { close(again); <-ctx.Done() })
	<-again
	l.Stop()
}

func TestLoopEndsWithItsContext(t *testing.T) {
	var l startstop.Loop
	ctx, cancel := context.WithCancel(context.Background())
	l.StartLoop(ctx, func(ctx context.Context) { <-ctx.Done() })
	cancel()
	<-l.Done()
	l.Stop()
}

type fake struct {
	name string
	err  error
	log  *[]string
}

func (f fake) Start(context.Context) error {
	*f.log = append(*f.log, "start "+f.name)
	return f.err
}
func (f fake) Stop() { *f.log = append(*f.log, "stop "+f.name) }

func TestStartAllStopsWhatStartedWhenOneFails(t *testing.T) {
	var log []string
	boom := errors.New("boom")
	err := startstop.StartAll(context.Background(), fake{"a", nil, &log}, fake{"b", nil, &log}, fake{"c", boom, &log}, fake{"d", nil, &log})
	if !errors.Is(err, boom) {
		t.Fatalf("StartAll returned %v, want boom", err)
	}
	if want := []string{"start a", "start b", "start c", "stop b", "stop a"}; !slices.Equal(log, want) {
		t.Fatalf("calls %q, want %q", log, want)
	}
	log = nil
	startstop.StopAll(fake{"x", nil, &log}, fake{"y", nil, &log})
	if want := []string{"stop x", "stop y"}; !slices.Equal(log, want) {
		t.Fatalf("StopAll calls %q, want %q", log, want)
	}
}

func TestFuncStress(t *testing.T) {
	startstoptest.Stress(t, startstop.NewFunc(func(ctx context.Context) { <-ctx.Done() }))
}

// A loop that ignores its context would hang Stop: Stress must say so, or
// it checks nothing.
func TestStressCatchesALeak(t *testing.T) {
	var leaked []chan struct{}
	svc := leaky{started: &leaked}
	ft := &fakeT{TB: t}
	startstoptest.Stress(ft, svc)
	for _, c := range leaked {
		close(c)
	}
	if !ft.failed {
		t.Fatal("Stress passed a service whose goroutines outlive Stop")
	}
}

// leaky starts a goroutine per Start that Stop does not end.
type leaky struct{ started *[]chan struct{} }

var leakMu = make(chan struct{}, 1)

func (l leaky) Start(context.Context) error {
	leakMu <- struct{}{}
	c := make(chan struct{})
	*l.started = append(*l.started, c)
	<-leakMu
	go func() { <-c }()
	return nil
}
func (leaky) Stop() {}

type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) Fatalf(string, ...any) { f.failed = true }
func (f *fakeT) Helper()               {}
