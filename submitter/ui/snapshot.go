package ui

import (
	"context"
	"sync"
	"time"

	"github.com/dtsched/dts/internal/wire"
)

// overview is what the Overview page shows, read at once.
type overview struct {
	At          time.Time
	Stats       wire.StatsResponse
	Leader      string
	LeaderEpoch int64
	Queues      []wire.QueueInfo
}

// snapshot holds the Overview's numbers for every viewer of this process:
// they are read (the same queries as GET /stats and GET /queues) at most
// once per interval,
// so a wall of open consoles costs one count every interval, not one per
// page view. A viewer that finds them stale reads them again while the
// others wait for that one read.
type snapshot struct {
	svc      Service
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	last overview // zero At: never read
}

// snapshotTimeout bounds one read; it is not the viewer's to cancel, since
// other viewers wait for it.
const snapshotTimeout = 5 * time.Second

func newSnapshot(svc Service, interval time.Duration, now func() time.Time) *snapshot {
	return &snapshot{svc: svc, interval: interval, now: now}
}

func (s *snapshot) get(ctx context.Context) (overview, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.At.IsZero() && s.now().Sub(s.last.At) < s.interval {
		return s.last, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotTimeout)
	defer cancel()
	st, err := s.svc.Stats(rctx)
	if err != nil {
		return overview{}, err
	}
	id, epoch, err := s.svc.Leader(rctx)
	if err != nil {
		return overview{}, err
	}
	qs, err := s.svc.Queues(rctx)
	if err != nil {
		return overview{}, err
	}
	s.last = overview{At: s.now(), Stats: st, Leader: id, LeaderEpoch: epoch, Queues: qs.Queues}
	return s.last, nil
}
