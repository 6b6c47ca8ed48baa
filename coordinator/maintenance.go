package coordinator

import (
	"context"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// maintenanceStore is what the maintainer reads and writes.
type maintenanceStore interface {
	WorkerSync(ctx context.Context, epoch int64, ws []store.WorkerRow) error
	WorkerDrainList(ctx context.Context) ([]string, error)
	WorkerCleanup(ctx context.Context, epoch int64, age time.Duration) (int64, error)
	JobCleanup(ctx context.Context, epoch int64, doneAge, failedAge time.Duration, batch int) (int64, error)
	JobCountState(ctx context.Context, state job.State) (int64, error)
	DeadMirrorPage(ctx context.Context, after store.DeadCursor, limit int) ([]store.DeadMeta, store.DeadCursor, error)
	RollupWrite(ctx context.Context, epoch int64, minute time.Time) (int64, error)
	RollupCleanup(ctx context.Context, epoch int64, age time.Duration) (int64, error)
}

// maintenanceQueue is the Redis side of the dead-letter mirror.
type maintenanceQueue interface {
	DeadLen(ctx context.Context) (int64, error)
	DeadRebuildStart(ctx context.Context) error
	DeadRebuildAppend(ctx context.Context, es []wire.DeadEntry) error
	DeadRebuildFinish(ctx context.Context, epoch int64) error
	DropWorkerQueues(ctx context.Context, workerID string) error
}

// maintainer records the fleet in PostgreSQL every heartbeat interval,
// keeps the Redis dead-letter list in step with PostgreSQL's failed jobs,
// deletes finished jobs past their retention, forgets workers unavailable
// for an hour, and writes the per-minute rollup of the console's charts
// once a minute (rollup.go).
type maintainer struct {
	base
	startstop.Loop
	store maintenanceStore
	queue maintenanceQueue
}

// Start starts the maintenance; Stop stops it.
func (m *maintainer) Start(ctx context.Context) error {
	m.StartLoop(ctx, m.run)
	return nil
}

func (m *maintainer) run(ctx context.Context) {
	t := time.NewTicker(m.cfg.HeartbeatInterval)
	defer t.Stop()
	var lastClean, lastMirror, lastRollup time.Time
	for ctx.Err() == nil {
		now := m.now()
		m.syncWorkers(ctx)
		lastRollup = m.rollup(ctx, now, lastRollup)
		if now.Sub(lastMirror) >= m.cfg.DeadMirrorInterval {
			lastMirror = now
			m.mirrorDead(ctx)
		}
		if now.Sub(lastClean) >= m.cfg.CleanupInterval {
			lastClean = now
			m.clean(ctx)
		}
		if horizon, ok := m.l.live.fresh(now, 2*m.cfg.HeartbeatInterval); ok {
			for _, id := range m.l.workers.Remove(horizon, time.Hour) {
				if err := m.queue.DropWorkerQueues(ctx, id); err != nil {
					m.redisError(ctx, redisOpDropWorkerQueues, err)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

func (m *maintainer) clean(ctx context.Context) {
	m.cleanRollup(ctx)
	if _, err := m.store.WorkerCleanup(ctx, m.l.epoch, m.cfg.RetentionCompleted); err != nil {
		m.storeError(ctx, storeOpCleanup, err)
	}
	n, err := m.store.JobCleanup(ctx, m.l.epoch, m.cfg.RetentionCompleted, m.cfg.RetentionFailed, 5000)
	if err != nil {
		m.storeError(ctx, storeOpCleanup, err)
	} else if n > 0 {
		m.metrics.cleaned.Add(float64(n))
		m.log.InfoContext(ctx, "retention cleaner deleted finished jobs", "count", n)
	}
}

// syncWorkers reads which workers operators asked to drain (so that
// dispatch gives them no new jobs from now on), then records the fleet.
func (m *maintainer) syncWorkers(ctx context.Context) {
	if drain, err := m.store.WorkerDrainList(ctx); err != nil {
		m.storeError(ctx, storeOpSyncWorkers, err)
	} else {
		m.l.workers.SetDrainRequested(drain)
	}
	snap := m.l.workers.Snapshot()
	rows := make([]store.WorkerRow, 0, len(snap))
	for _, w := range snap {
		row := store.WorkerRow{ID: w.ID, JobTypes: w.Types, Concurrency: w.Concurrency, State: w.State(),
			InFlight: len(w.InFlight), LastHeartbeatAt: w.LastSeen, Host: w.Host, Version: w.Version}
		if !w.LastAssignedAt.IsZero() {
			at := w.LastAssignedAt
			row.LastAssignedAt = &at
		}
		rows = append(rows, row)
	}
	if err := m.store.WorkerSync(ctx, m.l.epoch, rows); err != nil {
		m.storeError(ctx, storeOpSyncWorkers, err)
	}
}

// maxDeadMirror bounds the Redis dead-letter list: the newest entries are
// mirrored; PostgreSQL (GET /dlq) has them all.
const maxDeadMirror = 100_000

// deadMirrorPage is how many entries one step of a rebuild reads and writes.
const deadMirrorPage = 1000

// mirrorDead rebuilds the Redis dead-letter list from PostgreSQL when their
// lengths differ (after a Redis flush, a lost push, a requeue or
// retention), page by page: neither side ever holds the whole list.
func (m *maintainer) mirrorDead(ctx context.Context) {
	want, err := m.store.JobCountState(ctx, job.StateFailed)
	if err != nil {
		m.storeError(ctx, storeOpCountDead, err)
		return
	}
	have, err := m.queue.DeadLen(ctx)
	if err != nil {
		m.redisError(ctx, redisOpDLQLen, err)
		return
	}
	if min(want, maxDeadMirror) == have {
		return
	}
	if err := m.queue.DeadRebuildStart(ctx); err != nil {
		m.redisError(ctx, redisOpDLQRebuild, err)
		return
	}
	var cursor store.DeadCursor
	written := 0
	for written < maxDeadMirror {
		page, next, err := m.store.DeadMirrorPage(ctx, cursor, min(deadMirrorPage, maxDeadMirror-written))
		if err != nil {
			m.storeError(ctx, storeOpListDead, err)
			return
		}
		es := make([]wire.DeadEntry, len(page))
		for i, d := range page {
			es[i] = deadEntry(d)
		}
		if err := m.queue.DeadRebuildAppend(ctx, es); err != nil {
			m.redisError(ctx, redisOpDLQRebuild, err)
			return
		}
		written += len(page)
		cursor = next
		if len(page) < deadMirrorPage {
			break
		}
	}
	if err := m.queue.DeadRebuildFinish(ctx, m.l.epoch); err != nil {
		if store.IsDeposed(err) {
			m.storeError(ctx, storeOpDLQRebuild, err)
			return
		}
		m.redisError(ctx, redisOpDLQRebuild, err)
		return
	}
	m.metrics.deadMirrorRebuilds.Inc()
	m.log.InfoContext(ctx, "rebuilt the Redis dead-letter list from PostgreSQL", "entries", written, "had", have)
}
