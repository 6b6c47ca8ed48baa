// Package startstop is the lifecycle every long-running part of dts
// follows: a Service is built without starting anything, Start starts its
// goroutines and returns, and Stop ends them and waits until they have
// returned. Stop is idempotent and safe before Start, from any goroutine,
// and a stopped service may be started again.
//
// A part that is one loop embeds a Loop; a part made of parts starts them
// with StartAll and stops them with StopAll, in the order it chooses
// (producers before consumers).
package startstop

import (
	"context"
	"sync"
)

// Service is a long-running part.
type Service interface {
	// Start starts the service's goroutines under ctx and returns; it
	// fails only when the service cannot run (then nothing is left
	// running). Starting a running service does nothing.
	Start(ctx context.Context) error
	// Stop ends the service and waits until its goroutines have returned.
	Stop()
}

// Loop runs one goroutine: StartLoop starts it (once while it runs), Stop
// cancels its context and waits for it to return. The zero Loop is ready;
// embed it in a service whose Start calls StartLoop.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// StartLoop runs run in a new goroutine under a context that Stop cancels.
// It returns false, and runs nothing, when the loop is already running.
func (l *Loop) StartLoop(ctx context.Context, run func(context.Context)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		select {
		case <-l.done:
		default:
			return false // running
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	go func() {
		defer close(done)
		defer cancel()
		run(ctx)
	}()
	return true
}

// Stop cancels the loop's context and waits until run has returned. It
// does nothing on a loop that never started.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Done is closed when the loop's run has returned (nil before the first
// StartLoop).
func (l *Loop) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// StartAll starts the services in order. When one fails, it stops those it
// started, in reverse order, and returns that error.
func StartAll(ctx context.Context, services ...Service) error {
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			for j := i - 1; j >= 0; j-- {
				services[j].Stop()
			}
			return err
		}
	}
	return nil
}

// StopAll stops the services in the order given.
func StopAll(services ...Service) {
	for _, s := range services {
		s.Stop()
	}
}

// Func is a Service made of one loop function.
type Func struct {
	Loop
	run func(context.Context)
}

// NewFunc returns a Service that runs run as its loop.
func NewFunc(run func(context.Context)) *Func { return &Func{run: run} }

// Start starts the loop.
func (f *Func) Start(ctx context.Context) error {
	f.StartLoop(ctx, f.run)
	return nil
}
