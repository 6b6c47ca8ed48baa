package app

import (
	"context"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the queues. The submitter only writes the queues
// table: the leader coordinator reloads it every poll interval and its
// claims read it again in their own transaction (docs/architecture.md,
// "Queues"), so a change takes effect within one POLL_INTERVAL.

// Queues lists every queue with jobs waiting, running, dead or finished in
// the last minute, or with a setting, and its counts.
func (a *App) Queues(ctx context.Context) (wire.QueueListResponse, error) {
	qs, err := a.store.QueueStatsList(ctx)
	if err != nil {
		return wire.QueueListResponse{}, a.storeError(storeOpQueues, err)
	}
	resp := wire.QueueListResponse{Queues: make([]wire.QueueInfo, len(qs))}
	for i, q := range qs {
		resp.Queues[i] = wire.QueueInfo{Name: q.Name, Paused: q.Paused, Concurrency: q.Concurrency, Depth: q.Depth,
			Pending: q.Pending, OldestPendingSeconds: q.OldestAge, Running: q.Running,
			CompletedPerMinute: q.Completed, FailedPerMinute: q.Failed, Dead: q.Dead}
	}
	return resp, nil
}

// QueueSetPaused pauses or resumes a queue (audited).
func (a *App) QueueSetPaused(ctx context.Context, name string, paused bool) (wire.QueueInfo, error) {
	action := store.AuditQueueResume
	if paused {
		action = store.AuditQueuePause
	}
	return a.changeQueue(ctx, name, action, func() (store.QueueSetting, error) {
		return a.store.QueueSetPaused(ctx, name, paused)
	})
}

// QueueSetConcurrency caps a queue (0: no cap; audited).
func (a *App) QueueSetConcurrency(ctx context.Context, name string, n int) (wire.QueueInfo, error) {
	return a.changeQueue(ctx, name, store.AuditQueueConcurrency, func() (store.QueueSetting, error) {
		return a.store.QueueSetConcurrency(ctx, name, n)
	})
}

func (a *App) changeQueue(ctx context.Context, name, action string, change func() (store.QueueSetting, error)) (wire.QueueInfo, error) {
	if !wire.ValidQueueName(name) {
		return wire.QueueInfo{}, httpx.InvalidField("name", "a queue name is 1 to %d characters from A-Z a-z 0-9 _ . : -", wire.MaxQueueNameLen)
	}
	done, err := a.audit(ctx, action, store.AuditTargetQueue, name)
	if err != nil {
		return wire.QueueInfo{}, err
	}
	qs, err := change()
	if err != nil {
		done(failure(err))
		return wire.QueueInfo{}, a.storeError(storeOpQueueWrite, err)
	}
	done(map[string]any{"result": "ok", "paused": qs.Paused, "concurrency": qs.Concurrency})
	a.wake() // a resumed queue's jobs are due now
	return wire.QueueInfo{Name: qs.Name, Paused: qs.Paused, Concurrency: qs.Concurrency}, nil
}
