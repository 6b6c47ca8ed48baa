package app

import (
	"context"
	"net/http"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the workers: the fleet as the leader coordinator last
// wrote it to the workers table, so the submitter answers without asking
// the coordinator (whose own /workers shows its live registry).

// WorkerList returns every recorded worker with the jobs it holds leased.
func (a *App) WorkerList(ctx context.Context) ([]wire.Worker, error) {
	rows, err := a.store.WorkerList(ctx)
	if err != nil {
		return nil, a.storeError(storeOpWorkers, err)
	}
	leased, err := a.store.WorkerLeasedJobs(ctx)
	if err != nil {
		return nil, a.storeError(storeOpWorkers, err)
	}
	out := make([]wire.Worker, len(rows))
	for i, row := range rows {
		out[i] = workerView(row, leased[row.ID])
	}
	return out, nil
}

// WorkerGet returns one recorded worker with the jobs it holds leased.
func (a *App) WorkerGet(ctx context.Context, id string) (wire.Worker, error) {
	row, err := a.store.WorkerGet(ctx, id)
	if err != nil {
		return wire.Worker{}, a.storeError(storeOpWorkers, err)
	}
	leased, err := a.store.WorkerLeasedJobs(ctx)
	if err != nil {
		return wire.Worker{}, a.storeError(storeOpWorkers, err)
	}
	return workerView(row, leased[row.ID]), nil
}

// WorkerDrain asks that a worker get no new jobs (audited): the leader
// coordinator reads the request at its next worker sync (within a
// heartbeat interval) and leases nothing more to it; its running jobs
// finish. The worker keeps running, idle, until it is stopped. The
// request stands through the worker's crashes and restarts under the same
// id until WorkerUndrain.
func (a *App) WorkerDrain(ctx context.Context, id string) (wire.Worker, error) {
	return a.workerDrainSet(ctx, id, true)
}

// WorkerUndrain withdraws an operator's drain request (audited): from the
// leader's next worker sync the worker gets jobs again. A worker not asked
// to drain is left as it is; a worker that drains itself (SIGTERM) goes on
// stopping.
func (a *App) WorkerUndrain(ctx context.Context, id string) (wire.Worker, error) {
	return a.workerDrainSet(ctx, id, false)
}

func (a *App) workerDrainSet(ctx context.Context, id string, drain bool) (wire.Worker, error) {
	action := store.AuditWorkerUndrain
	if drain {
		action = store.AuditWorkerDrain
	}
	done, err := a.audit(ctx, action, store.AuditTargetWorker, id)
	if err != nil {
		return wire.Worker{}, err
	}
	var row store.WorkerRow
	if drain {
		row, err = a.store.WorkerDrain(ctx, id, httpx.PrincipalFrom(ctx).Actor())
	} else {
		row, err = a.store.WorkerUndrain(ctx, id)
	}
	if err != nil {
		done(failure(err))
		if isNotFound(err) {
			return wire.Worker{}, httpx.Errorf(http.StatusNotFound, wire.CodeNotFound, "no such worker")
		}
		return wire.Worker{}, a.storeError(storeOpDrain, err)
	}
	done(map[string]any{"result": "ok", "state": row.State})
	return workerView(row, nil), nil
}

func workerView(row store.WorkerRow, leased []int64) wire.Worker {
	v := wire.Worker{WorkerID: row.ID, State: row.State, JobTypes: row.JobTypes, Concurrency: row.Concurrency,
		InFlight: row.InFlight, LastHeartbeatAt: row.LastHeartbeatAt.UTC(), LastAssignedAt: optTime(row.LastAssignedAt),
		Host: row.Host, Version: row.Version, DrainRequestedAt: optTime(row.DrainRequestedAt),
		DrainRequestedBy: row.DrainRequestedBy, LeasedJobs: make([]string, len(leased))}
	for i, id := range leased {
		v.LeasedJobs[i] = formatID(id)
	}
	if v.JobTypes == nil {
		v.JobTypes = []string{}
	}
	return v
}
