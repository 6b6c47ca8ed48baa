package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/schedule"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/app"
)

// This file holds the /schedules routes: periodic jobs. Reading needs the
// read scope; every change (create, pause, resume, delete, trigger) needs
// admin and is audited (app's schedules.go).

// decodeSchedule decodes and validates the body of POST /schedules. Every
// error names its field; the template's are prefixed with "job.".
func decodeSchedule(body []byte, maxPayload int) (app.ScheduleInsertParams, error) {
	var p app.ScheduleInsertParams
	var req wire.ScheduleRequest
	if err := decodeObject(body, &req); err != nil {
		return p, err
	}
	if req.Name == "" {
		return p, httpx.InvalidField("name", "required")
	}
	if msg := app.CheckText(req.Name, maxNameLen); msg != "" {
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
	p.Job = app.ScheduleJob{Name: jp.Name, Queue: jp.Queue, Priority: jp.Priority, Payload: jp.Payload,
		MaxRetries: jp.MaxRetries, TimeoutSeconds: jp.TimeoutSeconds}
	return p, nil
}

// createSchedule handles POST /schedules (admin; audited).
func (h *API) createSchedule(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	p, err := decodeSchedule(body, h.cfg.MaxPayloadBytes)
	if err != nil {
		return err
	}
	v, err := h.app.ScheduleCreate(r.Context(), p)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusCreated, v)
	return nil
}

// getSchedule handles GET /schedules/{id}.
func (h *API) getSchedule(w http.ResponseWriter, r *http.Request) error {
	return scheduleRoute(w, r, http.StatusOK, h.app.ScheduleGet)
}

// listSchedules handles GET /schedules?limit=&cursor=.
func (h *API) listSchedules(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	resp, err := h.app.ScheduleList(r.Context(), limit, r.URL.Query().Get("cursor"))
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// pauseSchedule handles POST /schedules/{id}/pause (admin; audited).
func (h *API) pauseSchedule(w http.ResponseWriter, r *http.Request) error {
	return scheduleRoute(w, r, http.StatusOK, h.app.SchedulePause)
}

// resumeSchedule handles POST /schedules/{id}/resume (admin; audited).
// The ticks of the pause are not caught up.
func (h *API) resumeSchedule(w http.ResponseWriter, r *http.Request) error {
	return scheduleRoute(w, r, http.StatusOK, h.app.ScheduleResume)
}

// deleteSchedule handles DELETE /schedules/{id} (admin; audited). It
// answers the schedule as it was; its jobs stay.
func (h *API) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	return scheduleRoute(w, r, http.StatusOK, h.app.ScheduleDelete)
}

// triggerSchedule handles POST /schedules/{id}/trigger (admin; audited):
// one job from the template, now. It is not a tick.
func (h *API) triggerSchedule(w http.ResponseWriter, r *http.Request) error {
	return scheduleRoute(w, r, http.StatusCreated, h.app.ScheduleTrigger)
}

// scheduleRoute runs call on the schedule in the path and answers its
// result with status.
func scheduleRoute[T any](w http.ResponseWriter, r *http.Request, status int, call func(context.Context, int64) (T, error)) error {
	id, err := scheduleID(r)
	if err != nil {
		return err
	}
	v, err := call(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, status, v)
	return nil
}

// scheduleID parses the {id} route parameter of a schedule route.
func scheduleID(r *http.Request) (int64, error) {
	raw := chi.URLParam(r, "id")
	id, err := app.ParseID(raw)
	if err != nil {
		return 0, httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "schedule id must be a positive integer, got %q", app.Truncate(raw, 40))
	}
	return id, nil
}
