package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/dtsched/dts/internal/wire"
)

// This file holds the /schedules calls: periodic jobs (docs/api.md,
// "Schedules"). Reads need the read scope; the rest need admin and are
// audited by the server.

// More of the API's types (docs/api.md describes every field).
type (
	// Schedule is a schedule as the API shows it; NextFireAt is nil while
	// it is paused.
	Schedule = wire.Schedule
	// ScheduleJob is a schedule's job template as the API shows it.
	ScheduleJob = wire.ScheduleJob
	// SchedulePage is one page of Schedules; NextCursor is nil on the last page.
	SchedulePage = wire.ScheduleListResponse
)

// Schedule policies (ScheduleSpec.Overlap, ScheduleSpec.CatchUp).
const (
	OverlapSkip  = "skip"  // no tick while the last tick's job is unfinished (the default)
	OverlapAllow = "allow" // a tick whatever the last one's job is doing
	CatchUpOne   = "one"   // one job for the ticks missed while no coordinator led (the default)
	CatchUpNone  = "none"  // missed ticks are dropped
)

// ScheduleSpec is a schedule to create.
type ScheduleSpec struct {
	// Name is unique among schedules (a repeat is ErrConflict).
	Name string
	// Cron is a 5-field cron expression, 6 with seconds first, or
	// @yearly, @monthly, @weekly, @daily, @hourly.
	Cron string
	// TimeZone is the IANA zone Cron is read in; "" is UTC.
	TimeZone string
	// Job is the template of each tick's job: its Options may not hold
	// Delay, RunAt, IdempotencyKey or the Unique options (the server
	// refuses them).
	Job Request
	// Overlap is OverlapSkip or OverlapAllow; "" is OverlapSkip.
	Overlap string
	// CatchUp is CatchUpOne or CatchUpNone; "" is CatchUpOne.
	CatchUp string
}

// CreateSchedule creates a schedule, which enqueues its first job at the
// next tick. Needs the admin scope.
func (c *Client) CreateSchedule(ctx context.Context, spec ScheduleSpec) (*Schedule, error) {
	job, err := spec.Job.wire()
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(wire.ScheduleRequest{Name: spec.Name, Cron: spec.Cron, TimeZone: spec.TimeZone,
		Job: raw, Overlap: spec.Overlap, CatchUp: spec.CatchUp})
	if err != nil {
		return nil, err
	}
	var out Schedule
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/schedules", body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ScheduleListParams pages Schedules. Zero fields are left out.
type ScheduleListParams struct {
	// Limit is the page size, 1..1000 (server default 50).
	Limit int
	// Cursor is the previous page's NextCursor.
	Cursor string
}

// Schedules returns one page of schedules, newest first.
func (c *Client) Schedules(ctx context.Context, p ScheduleListParams) (*SchedulePage, error) {
	q := url.Values{}
	set(q, "cursor", p.Cursor)
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var page SchedulePage
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/schedules", query: q, idempotent: true}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Schedule returns one schedule; an unknown id is ErrNotFound.
func (c *Client) Schedule(ctx context.Context, id string) (*Schedule, error) {
	var out Schedule
	if _, err := c.do(ctx, request{method: http.MethodGet, path: schedulePath(id, ""), idempotent: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PauseSchedule stops a schedule's ticks until ResumeSchedule; pausing a
// paused schedule changes nothing. Needs the admin scope.
func (c *Client) PauseSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.changeSchedule(ctx, http.MethodPost, id, "/pause", true)
}

// ResumeSchedule restarts a paused schedule from its next tick after now
// (the ticks missed while paused are not enqueued). Needs the admin scope.
func (c *Client) ResumeSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.changeSchedule(ctx, http.MethodPost, id, "/resume", true)
}

// DeleteSchedule deletes a schedule and answers it as it was; the jobs it
// enqueued stay. Needs the admin scope.
func (c *Client) DeleteSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.changeSchedule(ctx, http.MethodDelete, id, "", false)
}

// TriggerSchedule enqueues one job from the schedule's template now,
// paused or not; it is not a tick (the next tick stays as it was). Needs
// the admin scope. It is not retried on a 503 that may have created it.
func (c *Client) TriggerSchedule(ctx context.Context, id string) (Submitted, error) {
	var out Submitted
	_, err := c.do(ctx, request{method: http.MethodPost, path: schedulePath(id, "/trigger")}, &out)
	return out, err
}

func (c *Client) changeSchedule(ctx context.Context, method, id, action string, idempotent bool) (*Schedule, error) {
	var out Schedule
	if _, err := c.do(ctx, request{method: method, path: schedulePath(id, action), idempotent: idempotent}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func schedulePath(id, action string) string {
	return fmt.Sprintf("/schedules/%s%s", url.PathEscape(id), action)
}
