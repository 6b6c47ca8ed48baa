package wire

import "time"

// Limits (docs/api.md, "Limits"): a concurrency cap and a rate per key,
// where a key is "name:<job name>" or a job's concurrency_key.

// Bounds of a limit.
const (
	// MaxLimitKeyLen bounds a limit's key and a job's concurrency_key, in
	// characters.
	MaxLimitKeyLen = 200
	// MaxLimitConcurrency bounds a limit's concurrency. MaxLimitRate
	// bounds its rate: each claim counts the key's starts within the
	// period (at most rate of them), so a rate costs up to that many index
	// entries per claim; a higher throughput takes a shorter period.
	MaxLimitConcurrency = 1_000_000
	MaxLimitRate        = 10_000
	// MaxLimitPeriodSeconds bounds a rate's period: one day.
	MaxLimitPeriodSeconds = 86_400
	// NameLimitPrefix starts the key of a limit on a job name.
	NameLimitPrefix = "name:"
)

// LimitInfo is one limit as GET /limits and PUT /limits/{key} show it.
type LimitInfo struct {
	Key string `json:"key"`
	// Concurrency is the most of the key's jobs leased at once across the
	// cluster; 0: no cap.
	Concurrency int `json:"concurrency"`
	// Rate is the most starts of the key's jobs within any PeriodSeconds;
	// 0: no rate limit.
	Rate          int `json:"rate"`
	PeriodSeconds int `json:"period_seconds"`
	// Running is how many of the key's jobs are leased now, Waiting how
	// many are pending or retrying (GET /limits only).
	Running   int64     `json:"running"`
	Waiting   int64     `json:"waiting"`
	UpdatedAt time.Time `json:"updated_at"`
}

// LimitListResponse is the body of GET /limits, by key.
type LimitListResponse struct {
	Limits []LimitInfo `json:"limits"`
}

// LimitUpdateRequest is the body of PUT /limits/{key}. It replaces the
// key's limit whole: a field left out is 0 (none). At least one of
// Concurrency and Rate must be above 0; Rate and PeriodSeconds go
// together.
type LimitUpdateRequest struct {
	Concurrency   int `json:"concurrency"`
	Rate          int `json:"rate"`
	PeriodSeconds int `json:"period_seconds"`
}
