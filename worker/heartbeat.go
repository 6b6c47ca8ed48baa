package worker

import (
	"context"
	"time"

	"github.com/dtsched/dts/internal/wire"
)

func (w *Worker) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		w.heartbeat(ctx, false)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) heartbeat(ctx context.Context, stopped bool) {
	hb := wire.Heartbeat{WorkerID: w.cfg.ID, JobTypes: w.jobTypes(), Concurrency: w.cfg.Concurrency,
		Prefetch: w.cfg.Prefetch, Queues: w.cfg.Queues,
		Draining: w.draining.Load(), Stopped: stopped, Credential: w.cfg.Credential, Codec: wire.CodecBinary, SentAt: time.Now()}
	// Each job's newest lease only: an older attempt still running here, or
	// its unsent result, has a lease that has ended and holds no slot the
	// coordinator knows of.
	w.mu.Lock()
	for id, token := range w.newest {
		hb.InFlight = append(hb.InFlight, wire.InFlight{JobID: id, LeaseToken: token})
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	if err := w.q.SendHeartbeat(ctx, hb); err != nil {
		w.metrics.countRedisError(redisOpHeartbeat)
		w.log.WarnContext(ctx, "heartbeat failed", "error", err)
	}
}
