package app

import (
	"context"
	"encoding/json"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/store"
)

// audit writes the audit row of an admin action before the action runs,
// so that no admin action happens unrecorded: if the row cannot be
// written, the action does not happen and the caller gets the error. done
// records the action's outcome in the row (best effort: a failure is
// logged, the row keeps saying the action was attempted).
//
// The actor is the principal in ctx (httpx.PrincipalFrom): the API's
// bearer token, or the console's login.
func (a *App) audit(ctx context.Context, action, targetType, targetID string) (done func(outcome map[string]any), err error) {
	return a.auditWith(ctx, action, targetType, targetID, nil)
}

// auditWith is audit with details the row holds from the start, beside
// "result": "attempted" (what the action was asked to do, such as a
// requeue's new payload).
func (a *App) auditWith(ctx context.Context, action, targetType, targetID string, details map[string]any) (done func(outcome map[string]any), err error) {
	actor := httpx.PrincipalFrom(ctx).Actor()
	first := json.RawMessage(`{"result":"attempted"}`)
	if len(details) > 0 {
		m := map[string]any{"result": "attempted"}
		for k, v := range details {
			m[k] = v
		}
		first = detailsOf(m)
	}
	id, err := a.store.AuditInsert(ctx, store.AuditEntry{Actor: actor, Action: action, TargetType: targetType,
		TargetID: targetID, Details: first})
	if err != nil {
		return nil, a.storeError(storeOpAudit, err)
	}
	return func(outcome map[string]any) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bestEffortTimeout)
		defer cancel()
		if err := a.store.AuditSetOutcome(ctx, id, outcome); err != nil {
			a.metrics.countStoreError(storeOpAudit)
			a.logger.ErrorContext(ctx, "record audit outcome", "audit_id", id, "action", action, "error", err)
		}
	}, nil
}

// failure is the audit outcome of an action that failed: the error code
// the caller got.
func failure(err error) map[string]any {
	status, body := httpx.Classify(err)
	return map[string]any{"result": "failed", "status": status, "code": body.Code}
}
