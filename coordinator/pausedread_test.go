package coordinator

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// pausingQueue passes heartbeat reads through until hold is called; then
// it keeps the answer of the next read (its send done) until release, and
// holds the read after it before sending it, as a leader paused with a
// read in flight would.
type pausingQueue struct {
	heartbeatQueue

	mu       sync.Mutex
	holding  bool
	heldRead chan struct{} // closed when a read's answer is held
	release  chan struct{} // closed by the test: hand the answer over
	nextRead chan struct{} // closed when the read after it arrives
}

func (q *pausingQueue) hold() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.holding = true
	q.heldRead, q.release, q.nextRead = make(chan struct{}), make(chan struct{}), make(chan struct{})
}

func (q *pausingQueue) ReadHeartbeats(ctx context.Context, after string, max int, block time.Duration) (queue.HeartbeatRead, error) {
	q.mu.Lock()
	holding, held := q.holding, q.heldRead
	q.mu.Unlock()
	select {
	case <-held:
		// The read after the held one: it waits, unsent, till the test ends.
		close(q.nextRead)
		<-ctx.Done()
		return queue.HeartbeatRead{}, ctx.Err()
	default:
	}
	r, err := q.heartbeatQueue.ReadHeartbeats(ctx, after, max, block)
	if holding {
		close(held)
		select {
		case <-q.release:
		case <-ctx.Done():
		}
	}
	return r, err
}

// TestPausedReadDoesNotRefreshTheHorizon: a heartbeat read whose answer is
// handled long after it was sent (the leader paused meanwhile) knows
// nothing about the pause, so it must not make the reaper count itself
// caught up: liveness stays stale until a read sent after the pause comes
// back. Counted as of when the answer was handled, a paused leader's
// reaper reclaimed live workers' leases as lease_timeout.
func TestPausedReadDoesNotRefreshTheHorizon(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	q := &pausingQueue{heartbeatQueue: r.queue}
	h := r.heartbeatReader()
	h.queue = q
	lag := 2 * r.b.cfg.HeartbeatInterval
	r.start(h)
	testwait.For(t, 10*time.Second, "the reader to catch up", func() bool {
		_, ok := r.b.l.live.fresh(r.clock.now(), lag)
		return ok
	})

	q.hold()
	select {
	case <-q.heldRead:
	case <-time.After(10 * time.Second):
		t.Fatal("no read was held")
	}
	// The pause: twice the reaper's tolerance on the leader's clock, after
	// the held answer came back (its read was sent before that).
	r.clock.advance(2 * lag)
	close(q.release)
	select {
	case <-q.nextRead: // the held answer has been handled
	case <-time.After(10 * time.Second):
		t.Fatal("the reader never read again after the held answer")
	}
	if horizon, ok := r.b.l.live.fresh(r.clock.now(), lag); ok {
		t.Fatalf("after handling an answer sent before the pause, the reader counts itself caught up (horizon %v)", horizon)
	}
}

// holdingStore passes lease extensions through until hold is called;
// then it runs the next one and keeps its answer until release, as a
// leader paused just after the statement returned would.
type holdingStore struct {
	heartbeatStore

	mu      sync.Mutex
	holding bool
	held    chan struct{} // closed when an extension's answer is held
	release chan struct{} // closed by the test
}

func (s *holdingStore) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holding, s.held, s.release = true, make(chan struct{}), make(chan struct{})
}

func (s *holdingStore) JobLeaseExtend(ctx context.Context, p store.LeaseExtendParams) (int64, error) {
	n, err := s.heartbeatStore.JobLeaseExtend(ctx, p)
	s.mu.Lock()
	holding := s.holding
	s.holding = false
	s.mu.Unlock()
	if holding {
		close(s.held)
		select {
		case <-s.release:
		case <-ctx.Done():
		}
	}
	return n, err
}

// TestPausedExtensionStillSparesItsWorker: a leader pauses just after a
// lease extension returned, and the worker's leases run out meanwhile.
// After the pause the worker's leases are as unextended as if the
// statement had never run: the reaper must spare them (its worker is
// alive and was not heard since), not count them extended as of the
// moment the answer was handled and reclaim them as lease_timeout.
func TestPausedExtensionStillSparesItsWorker(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// A worker deadline far beyond the test: the worker is alive.
	r.b.l = newLeaderState(r.b.l.epoch, time.Minute)
	cs := r.insertLeased(2, "w")
	s := &holdingStore{heartbeatStore: r.store}
	h := r.heartbeatReader()
	h.base, h.store = r.b, s
	lag := 2 * r.b.cfg.HeartbeatInterval
	r.start(h)
	hb := wire.Heartbeat{WorkerID: "w", JobTypes: []string{"*"}, Concurrency: 8}
	for _, c := range cs {
		hb.InFlight = append(hb.InFlight, wire.InFlight{JobID: c.ID, LeaseToken: c.LeaseToken})
	}
	testwait.For(t, 10*time.Second, "the reader to catch up", func() bool {
		_, ok := r.b.l.live.fresh(r.clock.now(), lag)
		return ok
	})
	s.hold()
	if err := r.queue.SendHeartbeat(r.ctx, hb); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.held:
	case <-time.After(10 * time.Second):
		t.Fatal("no lease extension was held")
	}
	// The pause: the leases run out, and it lasts longer than the reaper's
	// tolerance. Another worker's heartbeat waits to be read after it.
	if _, err := r.db.Exec(r.ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if err := r.queue.SendHeartbeat(r.ctx, wire.Heartbeat{WorkerID: "x", JobTypes: []string{"*"}, Concurrency: 8}); err != nil {
		t.Fatal(err)
	}
	r.clock.advance(2 * lag)
	close(s.release)
	// The read after the pause (x's heartbeat) makes the reader caught up.
	testwait.For(t, 10*time.Second, "the reader caught up after the pause", func() bool {
		_, ok := r.b.l.live.fresh(r.clock.now(), lag)
		return ok
	})
	rp := r.reaper()
	rp.base = r.b
	rp.tick(r.ctx)
	if got := r.states(cs); !allIn(got, "leased") {
		t.Fatalf("after the pause: %v; want the live worker's jobs still leased", got)
	}
}
