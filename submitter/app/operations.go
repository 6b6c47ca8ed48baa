package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds background bulk operations: those of POST /jobs/bulk
// with background (and the console's "all N matching"), which GET
// /operations[/{id}] shows and POST /operations/{id}/cancel cancels.
//
// An operation is a row in PostgreSQL (store.Operation); this submitter
// runs the ones it started, a batch of at most store.DefaultBulkBatch jobs
// per transaction, holding each one's lease (opLease) and extending it with
// every batch. A submitter that stops gives its operations back
// (OperationRelease); every submitter looks for operations whose lease ran
// out (opSweepInterval) and goes on with them from their cursor, so an
// operation outlives the process that started it. The audit row written
// when it starts gets its outcome when it ends, whoever ends it.

// Background operation timings.
const (
	opLease         = 30 * time.Second // a batch takes far less
	opSweepInterval = 5 * time.Second  // how often to look for abandoned operations
	opRetryWait     = time.Second      // after a failed batch
	opMaxFailures   = 5                // failed batches in a row before the operation fails
	opListLimit     = 50               // GET /operations
)

// opRunner runs this submitter's background operations. Its loop sweeps
// for abandoned operations and starts the runs that launch asks for, each
// under the loop's context; when the loop stops, it waits for the runs and
// gives this process's operations back.
type opRunner struct {
	startstop.Loop
	a        *App
	owner    string     // this process, as the operations' owner column says
	launches chan int64 // operations to run here
	wg       sync.WaitGroup
	mu       sync.Mutex
	held     map[int64]bool
}

func newOpRunner(a *App) *opRunner {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return &opRunner{a: a, owner: "submitter-" + hex.EncodeToString(b), launches: make(chan int64, 64), held: map[int64]bool{}}
}

// Start starts the sweep and the runs.
func (o *opRunner) Start(ctx context.Context) error {
	o.StartLoop(ctx, o.loop)
	return nil
}

// launch asks the loop to run operation id unless it runs already here.
// An operation the loop never starts (the runner stopped, or ctx ended
// first) is taken over by a sweep once its lease has run out.
func (o *opRunner) launch(ctx context.Context, id int64) {
	select {
	case <-o.Done():
		return // stopped
	default:
	}
	select {
	case o.launches <- id:
	case <-ctx.Done():
	case <-o.Done():
	}
}

func (o *opRunner) loop(ctx context.Context) {
	defer o.release()
	defer o.wg.Wait()
	t := time.NewTicker(opSweepInterval)
	defer t.Stop()
	for {
		o.sweep(ctx)
		for {
			select {
			case <-ctx.Done():
				return
			case id := <-o.launches:
				o.start(ctx, id)
				continue
			case <-t.C:
			}
			break
		}
	}
}

// start runs operation id in the background unless it runs already here.
func (o *opRunner) start(ctx context.Context, id int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held[id] {
		return
	}
	o.held[id] = true
	o.wg.Go(func() {
		defer func() {
			o.mu.Lock()
			delete(o.held, id)
			o.mu.Unlock()
		}()
		o.run(ctx, id)
	})
}

// run steps operation id until it ends, is canceled or taken over, or
// the runner stops (the lease is then released by close).
func (o *opRunner) run(ctx context.Context, id int64) {
	log := o.a.logger.With("operation_id", id)
	failures := 0
	for ctx.Err() == nil {
		res, err := o.a.store.OperationStep(ctx, id, o.owner, opLease, store.DefaultBulkBatch)
		switch {
		case errors.Is(err, store.ErrOperationLost):
			if op, gerr := o.a.store.OperationGet(ctx, id); gerr == nil && op.State == store.OperationCanceled {
				o.finish(ctx, op)
			}
			return
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			o.a.storeError(storeOpOperation, err)
			failures++
			log.WarnContext(ctx, "operation batch failed", "failures", failures, "error", err)
			if failures >= opMaxFailures {
				if ferr := o.a.store.OperationFail(ctx, id, o.owner, "batches kept failing: "+err.Error()); ferr != nil {
					log.ErrorContext(ctx, "record failed operation", "error", ferr)
					return
				}
				if op, gerr := o.a.store.OperationGet(ctx, id); gerr == nil {
					o.finish(ctx, op)
				}
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(opRetryWait):
			}
			continue
		}
		failures = 0
		if res.Affected > 0 && res.Op.Action == wire.BulkRequeue {
			o.a.wake()
		}
		o.a.tellCanceled(ctx, res.Leased)
		if res.Op.State != store.OperationRunning {
			o.finish(ctx, res.Op)
			return
		}
	}
}

// finish records an ended operation's outcome in the audit row of its start.
func (o *opRunner) finish(ctx context.Context, op store.Operation) {
	o.a.logger.InfoContext(ctx, "operation ended", "operation_id", op.ID, "action", op.Action, "state", op.State,
		"matched", op.Matched, "affected", op.Affected)
	if op.AuditID == 0 {
		return
	}
	out := map[string]any{"result": op.State, "operation_id": formatID(op.ID), "matched": op.Matched,
		"processed": op.Processed, "affected": op.Affected}
	if op.Error != "" {
		out["error"] = op.Error
	}
	if op.CanceledBy != "" {
		out["canceled_by"] = op.CanceledBy
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bestEffortTimeout)
	defer cancel()
	if err := o.a.store.AuditSetOutcome(actx, op.AuditID, out); err != nil {
		o.a.metrics.countStoreError(storeOpAudit)
		o.a.logger.ErrorContext(actx, "record audit outcome", "audit_id", op.AuditID, "error", err)
	}
}

// sweep takes over operations whose owner stopped or vanished.
func (o *opRunner) sweep(ctx context.Context) {
	for ctx.Err() == nil {
		op, ok, err := o.a.store.OperationClaimStale(ctx, o.owner, opLease)
		if err != nil {
			if ctx.Err() == nil {
				o.a.storeError(storeOpOperation, err)
				o.a.logger.WarnContext(ctx, "look for abandoned operations", "error", err)
			}
			return
		}
		if !ok {
			return
		}
		o.a.logger.InfoContext(ctx, "taking over an operation", "operation_id", op.ID, "affected", op.Affected)
		o.start(ctx, op.ID)
	}
}

// release gives this process's running operations back, for the next
// submitter to go on with; the runs have stopped (each between batches: a
// batch's transaction is rolled back if cut).
func (o *opRunner) release() {
	ctx, cancel := context.WithTimeout(context.Background(), bestEffortTimeout)
	defer cancel()
	if err := o.a.store.OperationRelease(ctx, o.owner); err != nil {
		o.a.logger.WarnContext(ctx, "release operations", "error", err)
	}
}

// bulkFilter validates the filters of a bulk request and returns the
// states the action applies to, narrowed by the status filter.
func bulkFilter(req wire.BulkRequest) (store.OperationFilter, error) {
	states, ok := bulkStates[req.Action]
	if !ok {
		return store.OperationFilter{}, httpx.InvalidField("action", "must be one of %s, %s, %s", wire.BulkCancel, wire.BulkRequeue, wire.BulkDelete)
	}
	f := store.OperationFilter{States: states, Name: req.Name, Queue: req.Queue}
	if req.Status != "" {
		st := job.State(req.Status)
		if !slices.Contains(states, st) {
			return f, httpx.InvalidField("status", "%s applies to %s", req.Action, statesOf(states))
		}
		f.States = []job.State{st}
	}
	if req.Name != "" {
		if msg := CheckText(req.Name, maxNameLen); msg != "" {
			return f, httpx.InvalidField("name", "%s", msg)
		}
	}
	if req.Queue != "" && !wire.ValidQueueName(req.Queue) {
		return f, httpx.InvalidField("queue", "must be 1 to %d characters from A-Z a-z 0-9 _ . : -", maxQueueLen)
	}
	if req.Fingerprint != "" {
		if err := checkFingerprint(req.Fingerprint, req.Name); err != nil {
			return f, err
		}
		if !slices.Contains(f.States, job.StateFailed) {
			return f, httpx.InvalidField("fingerprint", "only dead (failed) jobs have one: it goes with %s and %s", wire.BulkRequeue, wire.BulkDelete)
		}
		f.Fingerprint, f.States = req.Fingerprint, []job.State{job.StateFailed}
	}
	return f, nil
}

// BulkCount counts the jobs a bulk request's filters select now.
func (a *App) BulkCount(ctx context.Context, req wire.BulkRequest) (int64, error) {
	f, err := bulkFilter(req)
	if err != nil {
		return 0, err
	}
	n, err := a.store.OperationCount(ctx, req.Action, f)
	if err != nil {
		return 0, a.storeError(storeOpOperation, err)
	}
	return n, nil
}

// BulkStart counts the jobs req's filters select and, unless none, starts
// a background operation on them (audited: the row is written first and
// gets the outcome when the operation ends).
func (a *App) BulkStart(ctx context.Context, req wire.BulkRequest) (wire.BulkResponse, error) {
	f, err := bulkFilter(req)
	if err != nil {
		return wire.BulkResponse{}, err
	}
	n, err := a.store.OperationCount(ctx, req.Action, f)
	if err != nil {
		return wire.BulkResponse{}, a.storeError(storeOpOperation, err)
	}
	resp := wire.BulkResponse{Action: req.Action, Matched: n}
	if n == 0 {
		return resp, nil
	}
	actor := httpx.PrincipalFrom(ctx).Actor()
	auditID, err := a.store.AuditInsert(ctx, store.AuditEntry{Actor: actor, Action: store.AuditJobBulk, TargetType: store.AuditTargetJob,
		TargetID: req.Action, Details: detailsOf(map[string]any{"result": "attempted", "background": true, "status": req.Status,
			"name": req.Name, "queue": req.Queue, "fingerprint": req.Fingerprint, "matched": n})})
	if err != nil {
		return resp, a.storeError(storeOpAudit, err)
	}
	op, err := a.store.OperationCreate(ctx, store.OperationCreateParams{Action: req.Action, Filter: f, Matched: n,
		Actor: actor, AuditID: auditID, Owner: a.ops.owner, Lease: opLease})
	if err != nil {
		err = a.storeError(storeOpOperation, err)
		out := failure(err)
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bestEffortTimeout)
		defer cancel()
		_ = a.store.AuditSetOutcome(actx, auditID, out) // best effort, as audit's done
		return resp, err
	}
	a.ops.launch(ctx, op.ID)
	resp.OperationID = formatID(op.ID)
	return resp, nil
}

// OperationGet returns one operation.
func (a *App) OperationGet(ctx context.Context, id int64) (wire.Operation, error) {
	op, err := a.store.OperationGet(ctx, id)
	if err != nil {
		return wire.Operation{}, a.operationError(err)
	}
	return operationView(op), nil
}

// OperationList returns the newest operations.
func (a *App) OperationList(ctx context.Context) ([]wire.Operation, error) {
	ops, err := a.store.OperationList(ctx, opListLimit)
	if err != nil {
		return nil, a.storeError(storeOpOperation, err)
	}
	out := make([]wire.Operation, len(ops))
	for i, op := range ops {
		out[i] = operationView(op)
	}
	return out, nil
}

// OperationCancel cancels a running operation (audited): no batch starts
// after it; what the batches committed before stays done.
func (a *App) OperationCancel(ctx context.Context, id int64) (wire.Operation, error) {
	done, err := a.audit(ctx, store.AuditOperationCancel, store.AuditTargetOperation, formatID(id))
	if err != nil {
		return wire.Operation{}, err
	}
	op, err := a.store.OperationCancel(ctx, id, httpx.PrincipalFrom(ctx).Actor())
	if err != nil {
		err = a.operationError(err)
		done(failure(err))
		return wire.Operation{}, err
	}
	done(map[string]any{"result": "ok", "affected": op.Affected})
	return operationView(op), nil
}

func (a *App) operationError(err error) error {
	switch {
	case isNotFound(err):
		return httpx.Errorf(http.StatusNotFound, wire.CodeNotFound, "no such operation")
	case isConflict(err):
		return httpx.Errorf(http.StatusConflict, wire.CodeConflict, "the operation is over")
	}
	return a.storeError(storeOpOperation, err)
}

func operationView(op store.Operation) wire.Operation {
	v := wire.Operation{OperationID: formatID(op.ID), Action: op.Action, Name: op.Filter.Name, Queue: op.Filter.Queue,
		Fingerprint: op.Filter.Fingerprint, State: op.State, Matched: op.Matched, Processed: op.Processed, Affected: op.Affected, Actor: op.Actor,
		CanceledBy: op.CanceledBy, Error: op.Error, CreatedAt: op.CreatedAt.UTC(), UpdatedAt: op.UpdatedAt.UTC(),
		FinishedAt: optTime(op.FinishedAt), Statuses: make([]string, len(op.Filter.States))}
	for i, st := range op.Filter.States {
		v.Statuses[i] = string(st)
	}
	if v.FinishedAt != nil {
		t := v.FinishedAt.UTC()
		v.FinishedAt = &t
	}
	return v
}

// detailsOf is an audit row's details.
func detailsOf(m map[string]any) json.RawMessage {
	b, err := json.Marshal(m)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

// CheckBulk checks the filters of a bulk request as BulkStart would.
func CheckBulk(req wire.BulkRequest) error {
	_, err := bulkFilter(req)
	return err
}
