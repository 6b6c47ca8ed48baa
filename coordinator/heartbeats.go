package coordinator

import (
	"context"
	"strconv"
	"time"

	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// heartbeatStore is what the heartbeat reader writes: lease extensions.
type heartbeatStore interface {
	JobLeaseExtend(ctx context.Context, p store.LeaseExtendParams) (int64, error)
}

// heartbeatQueue is where it reads heartbeats.
type heartbeatQueue interface {
	LastHeartbeatID(ctx context.Context) (string, error)
	ReadHeartbeats(ctx context.Context, after string, max int, block time.Duration) (queue.HeartbeatRead, error)
}

// heartbeatReader reads the heartbeat stream: it registers workers, records
// when each was last heard, extends the leases of the jobs they report
// running (one statement per read), and tells the reaper how far it has
// caught up.
//
// A worker is judged by when its heartbeats arrived in Redis (the stream
// entry's id), never by when this process got round to reading them: a
// leader that was paused, or whose reads or writes were blocked, finds the
// heartbeats that arrived meanwhile with their true times. Each read first
// asks Redis for its time; a read that returns less than a full batch has
// seen every heartbeat up to that time, which becomes the horizon the reaper
// measures silence against (liveness). While reads fail, the horizon stands
// still and nobody is judged; after a failed read, and when the stream's
// ids or Redis's clock went backwards (Redis replaced, or restarted on a
// host whose clock is behind), every worker gets a fresh deadline on the new
// clock, since silence it could not hear proves nothing.
type heartbeatReader struct {
	base
	startstop.Loop
	store   heartbeatStore
	queue   heartbeatQueue
	allowed func(ctx context.Context, hb wire.Heartbeat) bool // worker credentials (auth.go)
}

// heartbeatReadMax is the most heartbeats read at a time.
const heartbeatReadMax = 1000

// Start starts reading; Stop stops it.
func (h *heartbeatReader) Start(ctx context.Context) error {
	h.StartLoop(ctx, h.run)
	return nil
}

func (h *heartbeatReader) run(ctx context.Context) {
	after := ""
	blind := true // no successful read yet, or the last one failed
	var lastServerTime time.Time
	for ctx.Err() == nil {
		if after == "" {
			id, err := h.queue.LastHeartbeatID(ctx)
			if err != nil {
				h.redisError(ctx, redisOpHeartbeatRead, err)
				continue
			}
			after = id
		}
		// What a read returns is known as of when it was sent, not when
		// its answer is handled: a leader paused while a read was in
		// flight finds, on waking, an answer from before the pause, and
		// must not count itself caught up until a read sent since has
		// come back.
		sent := h.now()
		r, err := h.queue.ReadHeartbeats(ctx, after, heartbeatReadMax, h.cfg.HeartbeatInterval)
		if err != nil {
			blind = true
			h.redisError(ctx, redisOpHeartbeatRead, err)
			continue
		}
		if !lastServerTime.IsZero() && r.ServerTime.Before(lastServerTime.Add(-h.cfg.HeartbeatInterval)) {
			h.log.WarnContext(ctx, "redis's clock went backwards; giving every worker a fresh deadline",
				"was", lastServerTime, "now", r.ServerTime)
			h.metrics.heartbeatResets.WithLabelValues("clock_backwards").Inc()
			blind = true
		}
		lastServerTime = r.ServerTime
		if len(r.Heartbeats) == 0 && r.Bad == 0 {
			// Nothing after our cursor. If the stream's newest entry is
			// older than it, the stream was replaced and its ids start
			// lower: read on from its end, or we would wait forever.
			last, err := h.queue.LastHeartbeatID(ctx)
			if err == nil && queue.CompareStreamIDs(last, after) < 0 {
				h.log.WarnContext(ctx, "heartbeat stream ids went backwards; reading on from its end",
					"was", after, "now", last)
				h.metrics.heartbeatResets.WithLabelValues("ids_backwards").Inc()
				r.Last, blind = last, true
			}
		}
		if blind {
			h.l.workers.TouchAll(r.ServerTime)
			blind = false
		}
		after = r.Last
		if r.Bad > 0 {
			h.metrics.badMessages.WithLabelValues("heartbeats").Add(float64(r.Bad))
		}
		if !h.apply(ctx, r.Heartbeats) {
			continue // not caught up: the extensions did not land
		}
		if !r.Full {
			h.l.live.caughtUp(r.ServerTime, sent)
		}
	}
}

// apply registers the heartbeats and extends the leases they name; it
// reports whether the extensions were written.
func (h *heartbeatReader) apply(ctx context.Context, hbs []queue.ReceivedHeartbeat) bool {
	ext := store.LeaseExtendParams{Epoch: h.l.epoch, Lease: h.cfg.LeaseDuration}
	var heard []string
	for _, rh := range hbs {
		hb := rh.Heartbeat
		if !h.allowed(ctx, hb) { // credentials; before "stopped" too
			continue
		}
		if hb.Stopped {
			// Its last results may still be on their way through the
			// results stream: the reaper releases what it left leased
			// once they are applied, and a little later (stopGrace).
			h.l.workers.Stopped(hb.WorkerID, rh.At)
			h.log.InfoContext(ctx, "worker said it stopped", "worker_id", hb.WorkerID)
			continue
		}
		heard = append(heard, hb.WorkerID)
		if h.l.workers.Heartbeat(hb, rh.At) {
			h.log.InfoContext(ctx, "worker joined", "worker_id", hb.WorkerID, "concurrency", hb.Concurrency, "job_types", hb.JobTypes)
			if !wire.ProtocolSupported(hb.Protocol) {
				h.log.WarnContext(ctx, "worker speaks a protocol version this coordinator does not; it gets no jobs",
					"worker_id", hb.WorkerID, "protocol", hb.Protocol, "supported", protocolRange(),
					"hint", "upgrade the coordinators before the workers (docs/protocol.md)")
			}
			h.l.wake()
		}
		for _, f := range hb.InFlight {
			ext.IDs, ext.Tokens = append(ext.IDs, f.JobID), append(ext.Tokens, f.LeaseToken)
			ext.Workers = append(ext.Workers, hb.WorkerID)
			ext.Waiting, ext.RunMillis = append(ext.Waiting, f.Waiting), append(ext.RunMillis, runMillis(f))
		}
	}
	// The extension holds as of when it was sent, not when its answer is
	// handled: a leader paused in between finds, on waking, leases that
	// ran out meanwhile, and the reaper must still spare their workers.
	sent := h.now()
	if len(ext.IDs) > 0 {
		if _, err := h.store.JobLeaseExtend(ctx, ext); err != nil {
			h.storeError(ctx, storeOpLeaseExtend, err)
			return false
		}
	}
	h.l.workers.Extended(heard, sent)
	return true
}

// runMillis is how long ago the job's handler started, as its worker
// says, or -1 if it does not say (an older worker): its time limit then
// counts from its lease's start.
func runMillis(f wire.InFlight) int64 {
	if !f.Started {
		return -1
	}
	return max(f.RunMillis, 0)
}

// protocolRange is the protocol versions this coordinator serves, as
// "1..2" (or "1" for one).
func protocolRange() string {
	if wire.MinProtocolVersion == wire.ProtocolVersion {
		return strconv.Itoa(wire.ProtocolVersion)
	}
	return strconv.Itoa(wire.MinProtocolVersion) + ".." + strconv.Itoa(wire.ProtocolVersion)
}

// protocolError says why a worker that announced protocol version v gets
// no jobs; "" if it speaks a version this coordinator serves.
func protocolError(v int) string {
	if wire.ProtocolSupported(v) {
		return ""
	}
	return "speaks worker protocol " + strconv.Itoa(v) + "; this coordinator serves " + protocolRange() + ": it gets no jobs"
}
