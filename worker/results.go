package worker

import (
	"context"
	"sync"
	"time"

	"github.com/dtsched/dts/internal/retry"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the result sender: it writes finished attempts' results
// to the results stream in batches, retrying until Redis takes them.

// sender is the service that runs sendLoop. Finish asks it to send what is
// queued and return; Stop gives up at once.
type sender struct {
	startstop.Loop
	w      *Worker
	mu     sync.Mutex
	finish chan struct{} // made by Start, closed by Finish
}

// Start starts sending.
func (s *sender) Start(ctx context.Context) error {
	s.mu.Lock()
	finish := make(chan struct{})
	if s.StartLoop(ctx, func(ctx context.Context) { s.w.sendLoop(ctx, finish) }) {
		s.finish = finish
	}
	s.mu.Unlock()
	return nil
}

// Finish lets the sender send what is queued, until ctx ends, then stops it.
func (s *sender) Finish(ctx context.Context) {
	s.mu.Lock()
	if s.finish != nil {
		close(s.finish)
		s.finish = nil
	}
	s.mu.Unlock()
	select {
	case <-s.Done():
	case <-ctx.Done():
	}
	s.Stop()
}

// sendLoop writes queued results to the stream in pipelined batches,
// retrying each until Redis takes it or ctx ends. While a result is unsent
// its job stays in the heartbeat's in-flight list, so its lease is extended
// meanwhile. Once done is closed it sends what is queued and returns.
func (w *Worker) sendLoop(ctx context.Context, done <-chan struct{}) {
	for {
		w.mu.Lock()
		batch := w.toSend
		w.toSend = nil
		w.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-w.queued:
				continue
			case <-done:
				w.mu.Lock()
				batch, w.toSend = w.toSend, nil
				w.mu.Unlock()
				if len(batch) == 0 {
					return
				}
			case <-ctx.Done():
				return
			}
		}
		for len(batch) > 0 {
			n := min(len(batch), 512)
			if !w.send(ctx, batch[:n]) {
				return
			}
			batch = batch[n:]
		}
	}
}

// send writes one batch of results, retrying until Redis takes it (true)
// or ctx ends (false).
func (w *Worker) send(ctx context.Context, batch []wire.Result) bool {
	for attempt := 1; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, redisTimeout)
		err := w.q.SendResults(sctx, batch)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false
		}
		w.metrics.countRedisError(redisOpSendResults)
		w.log.ErrorContext(ctx, "send results failed; retrying", "count", len(batch), "error", err)
		if w.sendFailed != nil {
			w.sendFailed()
		}
		_ = retry.Sleep(ctx, min(time.Duration(attempt)*100*time.Millisecond, 2*time.Second))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range batch {
		if r.Outcome == wire.OutcomeProgress {
			continue // the attempt's result may still be queued
		}
		delete(w.unsent, r.LeaseToken)
		if w.newest[r.JobID] == r.LeaseToken {
			delete(w.newest, r.JobID)
		}
	}
	return true
}

func (w *Worker) unsentCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.unsent)
}
