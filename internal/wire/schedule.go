package wire

import (
	"encoding/json"
	"time"
)

// The bodies of the /schedules routes (docs/api.md, "Schedules").

// ScheduleRequest is the body of POST /schedules.
type ScheduleRequest struct {
	// Name is unique among schedules: 1..128 characters, no control characters.
	Name string `json:"name"`
	// Cron is a cron expression: 5 fields (minute hour day-of-month month
	// day-of-week), or 6 with seconds first, or @yearly, @monthly,
	// @weekly, @daily, @hourly.
	Cron string `json:"cron"`
	// TimeZone is the IANA zone the expression is read in. Default "UTC".
	TimeZone string `json:"time_zone,omitempty"`
	// Job is the template of each tick's job: a submission body without
	// run_at, delay_seconds and idempotency_key.
	Job json.RawMessage `json:"job"`
	// Overlap is "skip" (default: no tick while the last tick's job is
	// unfinished) or "allow".
	Overlap string `json:"overlap,omitempty"`
	// CatchUp is "one" (default: one job for the ticks missed while no
	// coordinator led) or "none".
	CatchUp string `json:"catch_up,omitempty"`
}

// ScheduleJob is a schedule's job template as the API shows it.
type ScheduleJob struct {
	Name           string          `json:"name"`
	Queue          string          `json:"queue"`
	Priority       int             `json:"priority"`
	Payload        json.RawMessage `json:"payload"`
	MaxRetries     int             `json:"max_retries"`
	TimeoutSeconds int             `json:"timeout_seconds"`
}

// Schedule is a schedule as the API shows it. NextFireAt is null while it
// is paused; LastFireAt and LastJobID are null until its first tick.
type Schedule struct {
	ScheduleID string      `json:"schedule_id"`
	Name       string      `json:"name"`
	Cron       string      `json:"cron"`
	TimeZone   string      `json:"time_zone"`
	Job        ScheduleJob `json:"job"`
	Overlap    string      `json:"overlap"`
	CatchUp    string      `json:"catch_up"`
	Paused     bool        `json:"paused"`
	NextFireAt *time.Time  `json:"next_fire_at"`
	LastFireAt *time.Time  `json:"last_fire_at"`
	LastJobID  *string     `json:"last_job_id"`
	CreatedAt  time.Time   `json:"created_at"`
	// Warnings, in the answer of POST /schedules only, are those of POST
	// /submit_job for the template's name: no worker handles it. Absent
	// when none.
	Warnings []string `json:"warnings,omitempty"`
}

// ScheduleListResponse answers GET /schedules, newest first. NextCursor is
// null on the last page.
type ScheduleListResponse struct {
	Schedules  []Schedule `json:"schedules"`
	NextCursor *string    `json:"next_cursor"`
}
