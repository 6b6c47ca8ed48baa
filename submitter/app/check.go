package app

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the checks and the forms that the API's decoding and
// the application share, so that each rule has one home.

// Bounds of the fields the application checks. docs/api.md lists them.
const (
	maxNameLen        = job.MaxNameLen
	maxQueueLen       = wire.MaxQueueNameLen
	maxIdempotencyLen = 200 // characters
	// maxListBytes bounds the payloads, results and error texts of one
	// page of GET /jobs or GET /dlq: a thousand jobs of 1 MiB payloads
	// would otherwise make a 1 GiB answer, held in memory. A page cut
	// short by it carries next_cursor.
	maxListBytes = 8 << 20
)

// CheckPayload is the rule of every payload a job is given: a submitted
// one, and the one a dead job is requeued with (DeadRequeue). It returns
// the payload compacted (absent means null), or the 400 that names field.
func CheckPayload(raw json.RawMessage, maxPayload int, field string) (json.RawMessage, error) {
	payload, err := job.NormalizeJSON(raw, maxPayload)
	if err != nil {
		return nil, httpx.InvalidField(field, "%s", err.Error())
	}
	return payload, nil
}

// CheckText is job.CheckText for a field that may be left out: "" passes.
func CheckText(s string, max int) string {
	if s == "" {
		return ""
	}
	return job.CheckText(s, max)
}

// CheckIdempotencyKey checks an idempotency key; errors name field.
func CheckIdempotencyKey(key, field string) error {
	if msg := CheckText(key, maxIdempotencyLen); msg != "" {
		return httpx.InvalidField(field, "%s", msg)
	}
	return nil
}

// ParseID parses a positive decimal int64 (digits only: no sign, no spaces).
func ParseID(s string) (int64, error) {
	if s == "" || len(s) > 19 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errors.New("not a positive integer")
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, errors.New("not a positive integer")
	}
	return id, nil
}

func formatID(id int64) string { return strconv.FormatInt(id, 10) }

// StatesList is the job states, comma-separated, for error messages.
func StatesList() string {
	names := make([]string, len(job.States))
	for i, st := range job.States {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}

// Truncate cuts s to n bytes for an error message, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func isNotFound(err error) bool { return errors.Is(err, job.ErrNotFound) }
func isConflict(err error) bool { return errors.Is(err, job.ErrConflict) }

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optTime(t *time.Time) *time.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
