package submitter

import (
	"context"
	"net/http"
	"strconv"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

// This file serves a job's timeline and attempts (GET /jobs/{id}/timeline,
// and the console's Job page through the same service call). The store
// reads the row, its job_events and its audit rows in one round trip;
// job.BuildTimeline, a pure function, assembles them. Nothing on the
// lease, completion or heartbeat path writes a row for it
// (docs/state_machine.md, "What a job remembers of its attempts").

// getJobTimeline handles GET /jobs/{id}/timeline.
func (s *Server) getJobTimeline(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	t, err := s.svc.JobTimeline(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, t)
	return nil
}

// JobTimeline returns a job with its attempts and timeline. Operator
// actions name their actor only to a principal with the admin scope, as
// GET /admin/audit does.
func (v service) JobTimeline(ctx context.Context, id int64) (wire.JobTimeline, error) {
	j, evs, err := v.s.store.JobTimelineGet(ctx, id)
	if err != nil {
		return wire.JobTimeline{}, v.s.storeError(storeOpGet, err)
	}
	if !httpx.PrincipalFrom(ctx).Has(auth.ScopeAdmin) {
		for i := range evs {
			evs[i].Actor = ""
		}
	}
	return timelineView(j, job.BuildTimeline(j, evs)), nil
}

// timelineView is the API's form of a job and its timeline.
func timelineView(j *job.Job, t job.Timeline) wire.JobTimeline {
	v := wire.JobTimeline{Job: jobView(j), IdempotencyKey: optString(j.IdempotencyKey), DeadReason: optString(j.DeadReason),
		LeaseExpiresAt: optTime(j.LeaseExpiresAt), LeaseExtensions: j.LeaseExtensions,
		Attempts: make([]wire.Attempt, len(t.Attempts)), Timeline: make([]wire.TimelineEntry, len(t.Entries))}
	for i, a := range t.Attempts {
		w := wire.Attempt{Attempt: a.Attempt, WorkerID: a.WorkerID, LeaseToken: formatToken(a.LeaseToken), Running: a.Live,
			StartedAt: optTime(a.StartedAt), EndedAt: optTime(a.EndedAt), LeaseExtensions: a.Extensions,
			LeaseExpiresAt: optTime(a.ExpiresAt), Outcome: a.Outcome, Error: a.Error, NextState: string(a.NextState),
			RetryAt: optTime(a.RetryAt)}
		if d, ok := a.Duration(); ok {
			ms := d.Milliseconds()
			w.DurationMS = &ms
		}
		v.Attempts[i] = w
	}
	for i, e := range t.Entries {
		v.Timeline[i] = wire.TimelineEntry{At: e.At.UTC(), Kind: e.Kind, Attempt: e.Attempt, WorkerID: e.WorkerID,
			LeaseToken: formatToken(e.LeaseToken), Running: e.Live, Until: optTime(e.Until), LeaseExtensions: e.Extensions,
			Reason: e.Reason, Error: e.Error, Outcome: e.Outcome, OfAttempt: e.OfAttempt, Action: e.Action,
			Actor: e.Actor, Result: e.Result}
	}
	return v
}

// formatToken writes a fencing token in decimal, "" for none (0).
func formatToken(t int64) string {
	if t == 0 {
		return ""
	}
	return strconv.FormatInt(t, 10)
}
