package worker

import (
	"context"
	"os"
	"runtime/debug"
	"time"

	"github.com/dtsched/dts/internal/prefetch"
	"github.com/dtsched/dts/internal/wire"
)

func (w *Worker) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	// An adaptive prefetch is also sampled every prefetch.Sample: when the
	// last sample's completions ask for more than the prefetch the last
	// heartbeat said (prefetch.Bounds.Early), a heartbeat says so at once.
	// A burst after a quiet spell then raises the prefetch within a few
	// samples instead of at the next heartbeat. It only grows early; it
	// shrinks at the regular heartbeats, so a burst's end does not cost
	// extra beats.
	var sample <-chan time.Time
	if w.cfg.PrefetchMax > w.cfg.Prefetch {
		s := time.NewTicker(prefetch.Sample)
		defer s.Stop()
		sample = s.C
	}
	bounds := prefetch.Bounds{Min: w.cfg.Prefetch, Max: w.cfg.PrefetchMax}
	for {
		w.heartbeat(ctx, false)
		done, at := w.finished.Load(), time.Now()
		sampled, sampledAt := done, at
		for beat := false; !beat; {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.prefetch.Store(int64(bounds.Adapt(w.finished.Load()-done, time.Since(at))))
				beat = true
			case <-sample:
				total, now := w.finished.Load(), time.Now()
				if p, ok := bounds.Early(int(w.prefetch.Load()), total-sampled, now.Sub(sampledAt)); ok {
					w.prefetch.Store(int64(p))
					beat = true
				}
				sampled, sampledAt = total, now
			}
		}
	}
}

func (w *Worker) heartbeat(ctx context.Context, stopped bool) {
	hb := wire.Heartbeat{WorkerID: w.cfg.ID, JobTypes: w.jobTypes(), Concurrency: w.cfg.Concurrency,
		Prefetch: int(w.prefetch.Load()), Queues: w.cfg.Queues, Draining: w.draining.Load(), Stopped: stopped,
		Credential: w.cfg.Credential, Codec: wire.CodecTrace, Protocol: wire.ProtocolVersion, SentAt: time.Now(), Host: hostName, Version: buildVersion}
	// Each job's newest lease only: an older attempt still running here, or
	// its unsent result, has a lease that has ended and holds no slot the
	// coordinator knows of. Each says whether its handler has started, and
	// when: the job's time limit counts from then, so the lease of a job
	// waiting for a slot is extended however long it waits.
	now := time.Now()
	w.mu.Lock()
	for id, token := range w.newest {
		f := wire.InFlight{JobID: id, LeaseToken: token}
		var start time.Time
		known := true
		if a, ok := w.running[token]; ok {
			start = a.startedAt
		} else {
			start, known = w.unsent[token]
		}
		switch {
		case !known: // neither running nor unsent: say nothing of it
		case start.IsZero():
			f.Waiting = true
		default:
			f.Started, f.RunMillis = true, now.Sub(start).Milliseconds()
		}
		hb.InFlight = append(hb.InFlight, f)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	if err := w.q.SendHeartbeat(ctx, hb); err != nil {
		w.metrics.countRedisError(redisOpHeartbeat)
		w.log.WarnContext(ctx, "heartbeat failed", "error", err)
	}
}

// hostName and buildVersion are what heartbeats say about this process,
// for the operators' Workers page.
var (
	hostName, _  = os.Hostname()
	buildVersion = readBuildVersion()
)

// readBuildVersion is the main module's version, or the VCS revision it
// was built from (12 digits, "+dirty" when modified), or "dev".
func readBuildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}
