package app

import (
	"context"
	"fmt"
	"net/http"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/schedule"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the schedules: periodic jobs. Every change (create,
// pause, resume, delete, trigger) is audited, because a schedule creates
// jobs for as long as it lives, with no further request. The leader
// coordinator enqueues the ticks (coordinator/scheduler.go); here a
// schedule is only stored and shown.

// ScheduleList returns a page of the cron schedules, newest first, as GET
// /schedules does.
func (a *App) ScheduleList(ctx context.Context, limit int, cursor string) (wire.ScheduleListResponse, error) {
	var before int64
	if cursor != "" {
		var err error
		if before, err = ParseID(cursor); err != nil {
			return wire.ScheduleListResponse{}, httpx.InvalidField("cursor", "not a cursor from next_cursor")
		}
	}
	scs, next, err := a.store.ScheduleList(ctx, limit, before)
	if err != nil {
		return wire.ScheduleListResponse{}, a.storeError(storeOpScheduleRead, err)
	}
	resp := wire.ScheduleListResponse{Schedules: make([]wire.Schedule, len(scs))}
	for i, sc := range scs {
		resp.Schedules[i] = scheduleView(sc)
	}
	if next > 0 {
		c := formatID(next)
		resp.NextCursor = &c
	}
	return resp, nil
}

// ScheduleGet returns one schedule.
func (a *App) ScheduleGet(ctx context.Context, id int64) (wire.Schedule, error) {
	sc, err := a.store.ScheduleGet(ctx, id)
	if err != nil {
		return wire.Schedule{}, a.scheduleError(storeOpScheduleRead, err)
	}
	return scheduleView(sc), nil
}

// ScheduleCreate stores a schedule the API has decoded and checked
// (audited), with the warnings of its job's name (NameWarnings).
func (a *App) ScheduleCreate(ctx context.Context, p ScheduleInsertParams) (wire.Schedule, error) {
	done, err := a.audit(ctx, store.AuditScheduleCreate, store.AuditTargetSchedule, p.Name)
	if err != nil {
		return wire.Schedule{}, err
	}
	sc, err := a.store.ScheduleInsert(ctx, p)
	if err != nil {
		done(failure(err))
		if isConflict(err) {
			return wire.Schedule{}, httpx.Errorf(http.StatusConflict, wire.CodeConflict, "name: a schedule named %q exists", p.Name)
		}
		return wire.Schedule{}, a.storeError(storeOpScheduleWrite, err)
	}
	done(map[string]any{"result": "ok", "schedule_id": formatID(sc.ID)})
	v := scheduleView(sc)
	v.Warnings = a.NameWarnings(ctx, []store.JobInsertParams{{Name: p.Job.Name}}) // jobnames.go
	return v, nil
}

// SchedulePause pauses a schedule (audited).
func (a *App) SchedulePause(ctx context.Context, id int64) (wire.Schedule, error) {
	return a.changeSchedule(ctx, id, store.AuditSchedulePause, func() (*store.Schedule, error) {
		return a.store.SchedulePause(ctx, id)
	})
}

// ScheduleResume resumes a schedule (audited). The ticks of the pause are
// not caught up.
func (a *App) ScheduleResume(ctx context.Context, id int64) (wire.Schedule, error) {
	return a.changeSchedule(ctx, id, store.AuditScheduleResume, func() (*store.Schedule, error) {
		sc, err := a.store.ScheduleGet(ctx, id)
		if err != nil {
			return nil, err
		}
		spec, err := parseStored(sc)
		if err != nil {
			return nil, err
		}
		return a.store.ScheduleResume(ctx, id, spec.Next)
	})
}

// ScheduleDelete deletes a schedule (audited) and returns it as it was;
// its jobs stay.
func (a *App) ScheduleDelete(ctx context.Context, id int64) (wire.Schedule, error) {
	return a.changeSchedule(ctx, id, store.AuditScheduleDelete, func() (*store.Schedule, error) {
		return a.store.ScheduleDelete(ctx, id)
	})
}

// changeSchedule runs one audited change of schedule id.
func (a *App) changeSchedule(ctx context.Context, id int64, action string, change func() (*store.Schedule, error)) (wire.Schedule, error) {
	done, err := a.audit(ctx, action, store.AuditTargetSchedule, formatID(id))
	if err != nil {
		return wire.Schedule{}, err
	}
	sc, err := change()
	if err != nil {
		done(failure(err))
		return wire.Schedule{}, a.scheduleError(storeOpScheduleWrite, err)
	}
	done(map[string]any{"result": "ok", "paused": sc.Paused})
	return scheduleView(sc), nil
}

// ScheduleTrigger creates one job from a schedule's template, now
// (audited). It is not a tick.
func (a *App) ScheduleTrigger(ctx context.Context, id int64) (wire.SubmitResponse, error) {
	done, err := a.audit(ctx, store.AuditScheduleTrigger, store.AuditTargetSchedule, formatID(id))
	if err != nil {
		return wire.SubmitResponse{}, err
	}
	jobID, err := a.store.ScheduleTrigger(ctx, id)
	if err != nil {
		done(failure(err))
		return wire.SubmitResponse{}, a.scheduleError(storeOpScheduleWrite, err)
	}
	done(map[string]any{"result": "ok", "job_id": formatID(jobID)})
	a.metrics.submitted.Inc()
	a.wake()
	return wire.SubmitResponse{JobID: formatID(jobID), Status: string(job.StatePending)}, nil
}

// scheduleError is storeError with a not-found that says "schedule".
func (a *App) scheduleError(op storeOp, err error) error {
	if isNotFound(err) {
		return httpx.Errorf(http.StatusNotFound, wire.CodeNotFound, "no such schedule")
	}
	return a.storeError(op, err)
}

// parseStored reads a stored schedule's expression (checked when it was
// created).
func parseStored(sc *store.Schedule) (*schedule.Spec, error) {
	loc, err := schedule.LoadLocation(sc.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("schedule %d: time zone: %w", sc.ID, err)
	}
	spec, err := schedule.Parse(sc.Cron, loc)
	if err != nil {
		return nil, fmt.Errorf("schedule %d: cron: %w", sc.ID, err)
	}
	return spec, nil
}

// scheduleView is a schedule as the API shows it.
func scheduleView(sc *store.Schedule) wire.Schedule {
	v := wire.Schedule{
		ScheduleID: formatID(sc.ID),
		Name:       sc.Name,
		Cron:       sc.Cron,
		TimeZone:   sc.TimeZone,
		Job: wire.ScheduleJob{Name: sc.Job.Name, Queue: sc.Job.Queue, Priority: sc.Job.Priority, Payload: sc.Job.Payload,
			MaxRetries: sc.Job.MaxRetries, TimeoutSeconds: sc.Job.TimeoutSeconds},
		Overlap:    sc.Overlap,
		CatchUp:    sc.CatchUp,
		Paused:     sc.Paused,
		LastFireAt: optTime(sc.LastFireAt),
		CreatedAt:  sc.CreatedAt.UTC(),
	}
	if !sc.Paused {
		v.NextFireAt = optTime(&sc.NextFireAt)
	}
	if sc.LastJobID > 0 {
		id := formatID(sc.LastJobID)
		v.LastJobID = &id
	}
	if len(v.Job.Payload) == 0 {
		v.Job.Payload = []byte("null")
	}
	return v
}
