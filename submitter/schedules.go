package submitter

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/schedule"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the /schedules routes: periodic jobs. Reading needs the
// read scope; every change (create, pause, resume, delete, trigger) needs
// admin and is audited, because a schedule creates jobs for as long as it
// lives, with no further request. The leader coordinator enqueues the
// ticks (coordinator/scheduler.go); here a schedule is only checked,
// stored and shown.

// decodeSchedule decodes and validates the body of POST /schedules. Every
// error names its field; the template's are prefixed with "job.".
func decodeSchedule(body []byte, maxPayload int) (store.ScheduleInsertParams, error) {
	var p store.ScheduleInsertParams
	var req wire.ScheduleRequest
	if err := decodeObject(body, &req); err != nil {
		return p, err
	}
	if req.Name == "" {
		return p, httpx.InvalidField("name", "required")
	}
	if msg := checkText(req.Name, maxNameLen); msg != "" {
		return p, httpx.InvalidField("name", "%s", msg)
	}
	p.Name = req.Name

	p.TimeZone = req.TimeZone
	if p.TimeZone == "" {
		p.TimeZone = "UTC"
	}
	loc, err := schedule.LoadLocation(p.TimeZone)
	if err != nil {
		return p, httpx.InvalidField("time_zone", "%s", err.Error())
	}
	p.Cron = strings.TrimSpace(req.Cron)
	spec, err := schedule.Parse(p.Cron, loc)
	if err != nil {
		return p, httpx.InvalidField("cron", "%s", err.Error())
	}
	p.Next = spec.Next

	switch p.Overlap = req.Overlap; p.Overlap {
	case "":
		p.Overlap = schedule.OverlapSkip
	case schedule.OverlapSkip, schedule.OverlapAllow:
	default:
		return p, httpx.InvalidField("overlap", "must be %s or %s", schedule.OverlapSkip, schedule.OverlapAllow)
	}
	switch p.CatchUp = req.CatchUp; p.CatchUp {
	case "":
		p.CatchUp = schedule.CatchUpOne
	case schedule.CatchUpNone, schedule.CatchUpOne:
	default:
		return p, httpx.InvalidField("catch_up", "must be %s or %s", schedule.CatchUpNone, schedule.CatchUpOne)
	}

	if len(req.Job) == 0 || string(req.Job) == "null" {
		return p, httpx.InvalidField("job", "required: the template of each tick's job, as for POST /submit_job")
	}
	var jr wire.SubmitRequest
	if err := decodeObject(req.Job, &jr); err != nil {
		return p, withPrefix(err, "job")
	}
	switch {
	case jr.RunAt != nil:
		return p, httpx.InvalidField("job.run_at", "not allowed in a schedule: each tick's job is due at its tick")
	case jr.DelaySeconds != nil:
		return p, httpx.InvalidField("job.delay_seconds", "not allowed in a schedule: each tick's job is due at its tick")
	case jr.IdempotencyKey != "":
		return p, httpx.InvalidField("job.idempotency_key", "not allowed in a schedule: each tick is one job already")
	case jr.UniqueFor != nil || jr.UniqueStates != nil || jr.UniqueKey != "":
		return p, httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidUnique,
			"job.unique_for: not allowed in a schedule: overlap decides whether a tick may start another job")
	}
	jp, err := validateSubmit(&jr, maxPayload, "job.")
	if err != nil {
		return p, err
	}
	p.Job = store.ScheduleJob{Name: jp.Name, Queue: jp.Queue, Priority: jp.Priority, Payload: jp.Payload,
		MaxRetries: jp.MaxRetries, TimeoutSeconds: jp.TimeoutSeconds}
	return p, nil
}

// createSchedule handles POST /schedules (admin; audited).
func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	p, err := decodeSchedule(body, s.cfg.MaxPayloadBytes)
	if err != nil {
		return err
	}
	done, err := s.audit(r.Context(), store.AuditScheduleCreate, store.AuditTargetSchedule, p.Name)
	if err != nil {
		return err
	}
	sc, err := s.store.ScheduleInsert(r.Context(), p)
	if err != nil {
		done(failure(err))
		if isConflict(err) {
			return httpx.Errorf(http.StatusConflict, wire.CodeConflict, "name: a schedule named %q exists", p.Name)
		}
		return s.storeError(storeOpScheduleWrite, err)
	}
	done(map[string]any{"result": "ok", "schedule_id": formatID(sc.ID)})
	v := scheduleView(sc)
	v.Warnings = s.nameWarnings(r.Context(), []store.JobInsertParams{{Name: p.Job.Name}}) // jobnames.go
	httpx.WriteJSON(w, http.StatusCreated, v)
	return nil
}

// getSchedule handles GET /schedules/{id}.
func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) error {
	id, err := scheduleID(r)
	if err != nil {
		return err
	}
	sc, err := s.store.ScheduleGet(r.Context(), id)
	if err != nil {
		return s.scheduleError(storeOpScheduleRead, err)
	}
	httpx.WriteJSON(w, http.StatusOK, scheduleView(sc))
	return nil
}

// listSchedules handles GET /schedules?limit=&cursor=.
func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) error {
	limit, before, err := queryPage(r)
	if err != nil {
		return err
	}
	scs, next, err := s.store.ScheduleList(r.Context(), limit, before)
	if err != nil {
		return s.storeError(storeOpScheduleRead, err)
	}
	resp := wire.ScheduleListResponse{Schedules: make([]wire.Schedule, len(scs))}
	for i, sc := range scs {
		resp.Schedules[i] = scheduleView(sc)
	}
	if next > 0 {
		c := formatID(next)
		resp.NextCursor = &c
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// pauseSchedule handles POST /schedules/{id}/pause (admin; audited).
func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request) error {
	return s.changeSchedule(w, r, store.AuditSchedulePause, func(id int64) (*store.Schedule, error) {
		return s.store.SchedulePause(r.Context(), id)
	})
}

// resumeSchedule handles POST /schedules/{id}/resume (admin; audited).
// The ticks of the pause are not caught up.
func (s *Server) resumeSchedule(w http.ResponseWriter, r *http.Request) error {
	return s.changeSchedule(w, r, store.AuditScheduleResume, func(id int64) (*store.Schedule, error) {
		sc, err := s.store.ScheduleGet(r.Context(), id)
		if err != nil {
			return nil, err
		}
		spec, err := parseStored(sc)
		if err != nil {
			return nil, err
		}
		return s.store.ScheduleResume(r.Context(), id, spec.Next)
	})
}

// deleteSchedule handles DELETE /schedules/{id} (admin; audited). It
// answers the schedule as it was; its jobs stay.
func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	return s.changeSchedule(w, r, store.AuditScheduleDelete, func(id int64) (*store.Schedule, error) {
		return s.store.ScheduleDelete(r.Context(), id)
	})
}

// changeSchedule runs one audited change of the schedule in the path and
// answers the schedule.
func (s *Server) changeSchedule(w http.ResponseWriter, r *http.Request, action string, change func(id int64) (*store.Schedule, error)) error {
	id, err := scheduleID(r)
	if err != nil {
		return err
	}
	done, err := s.audit(r.Context(), action, store.AuditTargetSchedule, formatID(id))
	if err != nil {
		return err
	}
	sc, err := change(id)
	if err != nil {
		done(failure(err))
		return s.scheduleError(storeOpScheduleWrite, err)
	}
	done(map[string]any{"result": "ok", "paused": sc.Paused})
	httpx.WriteJSON(w, http.StatusOK, scheduleView(sc))
	return nil
}

// triggerSchedule handles POST /schedules/{id}/trigger (admin; audited):
// one job from the template, now. It is not a tick.
func (s *Server) triggerSchedule(w http.ResponseWriter, r *http.Request) error {
	id, err := scheduleID(r)
	if err != nil {
		return err
	}
	done, err := s.audit(r.Context(), store.AuditScheduleTrigger, store.AuditTargetSchedule, formatID(id))
	if err != nil {
		return err
	}
	jobID, err := s.store.ScheduleTrigger(r.Context(), id)
	if err != nil {
		done(failure(err))
		return s.scheduleError(storeOpScheduleWrite, err)
	}
	done(map[string]any{"result": "ok", "job_id": formatID(jobID)})
	s.metrics.submitted.Inc()
	s.wake()
	httpx.WriteJSON(w, http.StatusCreated, wire.SubmitResponse{JobID: formatID(jobID), Status: string(job.StatePending)})
	return nil
}

// scheduleError is storeError with a not-found that says "schedule".
func (s *Server) scheduleError(op storeOp, err error) error {
	if isNotFound(err) {
		return httpx.Errorf(http.StatusNotFound, wire.CodeNotFound, "no such schedule")
	}
	return s.storeError(op, err)
}

// scheduleID parses the {id} route parameter of a schedule route.
func scheduleID(r *http.Request) (int64, error) {
	raw := chi.URLParam(r, "id")
	id, err := parseID(raw)
	if err != nil {
		return 0, httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "schedule id must be a positive integer, got %q", truncate(raw, 40))
	}
	return id, nil
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

func isNotFound(err error) bool { return errors.Is(err, job.ErrNotFound) }
func isConflict(err error) bool { return errors.Is(err, job.ErrConflict) }
