package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/app"
)

// Limits of a submission. docs/api.md lists them; changing one changes the API.
const (
	maxNameLen        = job.MaxNameLen
	maxQueueLen       = wire.MaxQueueNameLen
	minPriority       = -1000
	maxPriority       = 1000
	defaultMaxRetries = 3
	maxMaxRetries     = 100
	maxDelaySeconds   = 365 * 24 * 3600
	maxTimeoutSeconds = 24 * 3600
	maxBatchJobs      = 1000
	maxDependsOn      = 1000 // parents of one job (depends_on and depends_on_index together)
	maxUniqueFor      = 30 * 24 * 3600
	maxUniqueKeyLen   = 200 // characters
)

// uniqueFields are the fields whose errors answer wire.CodeInvalidUnique.
var uniqueFields = []string{"unique_for", "unique_states", "unique_key"}

// decodeSubmit decodes and validates the body of POST /submit_job and
// POST /jobs. headerKey is the Idempotency-Key header ("" if absent). It
// never panics, whatever the input (FuzzSubmitDecode checks), and every
// error it returns is an *httpx.Error.
func decodeSubmit(body []byte, headerKey string, maxPayload int) (app.JobInsertParams, error) {
	var req wire.SubmitRequest
	if err := decodeObject(body, &req); err != nil {
		return app.JobInsertParams{}, err
	}
	return submitParams(&req, headerKey, maxPayload)
}

// submitParams validates one decoded single-job request (the body of
// POST /submit_job, or a compatibility route's body mapped onto it) and
// applies the Idempotency-Key header.
func submitParams(req *wire.SubmitRequest, headerKey string, maxPayload int) (app.JobInsertParams, error) {
	p, err := validateSubmit(req, maxPayload, "")
	if err != nil {
		return p, err
	}
	if len(req.DependsOnIndex) > 0 {
		return p, httpx.InvalidField("depends_on_index", "only in a batch (POST /submit_jobs); use depends_on with job ids")
	}
	if headerKey != "" {
		if err := app.CheckIdempotencyKey(headerKey, "Idempotency-Key header"); err != nil {
			return p, err
		}
		if p.IdempotencyKey != "" && p.IdempotencyKey != headerKey {
			return p, httpx.InvalidField("idempotency_key", "differs from the Idempotency-Key header")
		}
		p.IdempotencyKey = headerKey
	}
	return p, nil
}

// decodeBatch decodes and validates the body of POST /submit_jobs: a JSON
// array of jobs, or {"jobs": [...], "callback": {...}}. Errors name the
// job: "jobs[3].name: ...". A callback comes last, with Callback set.
//
// The body is decoded in one pass, since a JSON decoder per job costs most
// of the submitter's CPU under load; only a body that pass refuses is
// decoded again job by job (decodeBatchSlow), which names the job in the
// error.
// FuzzSubmitDecode checks that both ways agree.
func decodeBatch(body []byte, maxPayload int) ([]app.JobInsertParams, error) {
	var reqs []*wire.SubmitRequest
	var callback *wire.SubmitRequest
	var err error
	switch firstByte(body) {
	case '[':
		err = httpx.DecodeStrict(body, &reqs)
	case '{':
		var b struct {
			Jobs     []*wire.SubmitRequest `json:"jobs"`
			Callback *wire.SubmitRequest   `json:"callback"`
		}
		err = httpx.DecodeStrict(body, &b)
		reqs, callback = b.Jobs, b.Callback
	default:
		return decodeBatchSlow(body, maxPayload)
	}
	if err != nil || reqs == nil || slices.Contains(reqs, nil) { // null is not a job: the slow way says so
		return decodeBatchSlow(body, maxPayload)
	}
	return validateBatch(len(reqs), func(i int) (*wire.SubmitRequest, error) { return reqs[i], nil },
		func() (*wire.SubmitRequest, error) { return callback, nil }, maxPayload)
}

// decodeBatchSlow is decodeBatch one job at a time.
func decodeBatchSlow(body []byte, maxPayload int) ([]app.JobInsertParams, error) {
	var items []json.RawMessage
	var callback json.RawMessage
	switch first := firstByte(body); {
	case first == '[':
		if err := httpx.DecodeStrict(body, &items); err != nil {
			return nil, err
		}
	case first != '{' && first != 0 && json.Valid(body):
		return nil, httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidJSON, `must be a JSON array of jobs or {"jobs": [...]}`)
	default:
		var req wire.BatchSubmitRequest
		if err := decodeObject(body, &req); err != nil {
			return nil, err
		}
		if req.Jobs == nil {
			return nil, httpx.InvalidField("jobs", "required: an array of jobs")
		}
		items, callback = req.Jobs, req.Callback
	}
	cb := func() (*wire.SubmitRequest, error) {
		if len(callback) == 0 || string(callback) == "null" {
			return nil, nil
		}
		var req wire.SubmitRequest
		if err := decodeObject(callback, &req); err != nil {
			return nil, withPrefix(err, "callback")
		}
		return &req, nil
	}
	item := func(i int) (*wire.SubmitRequest, error) {
		var req wire.SubmitRequest
		if err := decodeObject(items[i], &req); err != nil {
			return nil, withPrefix(err, "jobs["+strconv.Itoa(i)+"]")
		}
		return &req, nil
	}
	return validateBatch(len(items), item, cb, maxPayload)
}

// validateBatch validates the n jobs of a batch, which item decodes, then
// the callback that callback decodes (nil: none).
func validateBatch(n int, item func(i int) (*wire.SubmitRequest, error), callback func() (*wire.SubmitRequest, error),
	maxPayload int) ([]app.JobInsertParams, error) {
	if n == 0 {
		return nil, httpx.InvalidField("jobs", "must hold at least one job")
	}
	if n > maxBatchJobs {
		return nil, httpx.InvalidField("jobs", "holds %d jobs, at most %d are allowed", n, maxBatchJobs)
	}
	out := make([]app.JobInsertParams, n, n+1)
	keys := make(map[string]int)
	for i := range n {
		req, err := item(i)
		if err != nil {
			return nil, err
		}
		prefix := "jobs[" + strconv.Itoa(i) + "]"
		p, err := validateSubmit(req, maxPayload, prefix+".")
		if err != nil {
			return nil, err
		}
		if p.IdempotencyKey != "" {
			if j, dup := keys[p.IdempotencyKey]; dup {
				return nil, httpx.InvalidField(prefix+".idempotency_key", "repeats the key of jobs[%d]", j)
			}
			keys[p.IdempotencyKey] = i
		}
		for _, j := range req.DependsOnIndex {
			if j < 0 || j >= i {
				return nil, httpx.InvalidField(prefix+".depends_on_index", "%d is not the index of an earlier job of the batch", j)
			}
		}
		out[i] = p
	}
	cb, err := callback()
	if err != nil {
		return nil, err
	}
	if cb != nil {
		if len(cb.DependsOn) > 0 || len(cb.DependsOnIndex) > 0 {
			return nil, httpx.InvalidField("callback", "takes no depends_on or depends_on_index: it depends on every job of the batch")
		}
		p, err := validateSubmit(cb, maxPayload, "callback.")
		if err != nil {
			return nil, err
		}
		if p.IdempotencyKey != "" {
			if j, dup := keys[p.IdempotencyKey]; dup {
				return nil, httpx.InvalidField("callback.idempotency_key", "repeats the key of jobs[%d]", j)
			}
		}
		p.Callback = true
		out = append(out, p)
	}
	return out, nil
}

// decodeObject decodes one JSON object strictly into v. A value of the
// wrong type in a unique_* field is wire.CodeInvalidUnique, like its other
// errors.
func decodeObject(data []byte, v any) error {
	if firstByte(data) != '{' && firstByte(data) != 0 {
		if !json.Valid(data) {
			return httpx.DecodeStrict(data, v) // reports the syntax error
		}
		return httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidJSON, "must be a JSON object")
	}
	err := httpx.DecodeStrict(data, v)
	var e *httpx.Error
	if errors.As(err, &e) && e.Code == wire.CodeInvalidField {
		for _, f := range uniqueFields {
			if strings.HasPrefix(e.Message, f+":") || strings.HasPrefix(e.Message, f+"[") {
				return &httpx.Error{Status: e.Status, Code: wire.CodeInvalidUnique, Message: e.Message}
			}
		}
	}
	return err
}

// withPrefix puts a batch item's name in front of a decode error's message.
func withPrefix(err error, prefix string) error {
	var e *httpx.Error
	if !errors.As(err, &e) {
		return err
	}
	sep := "."
	if e.Code != wire.CodeInvalidField && e.Code != wire.CodeInvalidUnique {
		sep = ": "
	}
	return &httpx.Error{Status: e.Status, Code: e.Code, Message: prefix + sep + e.Message}
}

func firstByte(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

// validateSubmit checks one decoded request and fills in the defaults.
// prefix ("" or "jobs[3].") goes in front of field names in errors.
func validateSubmit(req *wire.SubmitRequest, maxPayload int, prefix string) (app.JobInsertParams, error) {
	var p app.JobInsertParams
	bad := func(field, format string, args ...any) (app.JobInsertParams, error) {
		return app.JobInsertParams{}, httpx.InvalidField(prefix+field, format, args...)
	}

	p.Name = req.Name
	if req.Type != "" {
		if req.Name != "" && req.Name != req.Type {
			return bad("type", "differs from name; give one of them")
		}
		p.Name = req.Type
	}
	if p.Name == "" {
		return bad("name", "required")
	}
	if msg := app.CheckText(p.Name, maxNameLen); msg != "" {
		return bad("name", "%s", msg)
	}

	p.Queue = req.Queue
	if p.Queue == "" {
		p.Queue = "default"
	} else if !wire.ValidQueueName(p.Queue) {
		return bad("queue", "must be 1 to %d characters from A-Z a-z 0-9 _ . : -", maxQueueLen)
	}

	if req.Priority != nil {
		if *req.Priority < minPriority || *req.Priority > maxPriority {
			return bad("priority", "must be between %d and %d", minPriority, maxPriority)
		}
		p.Priority = *req.Priority
	}

	p.MaxRetries = defaultMaxRetries
	if req.MaxRetries != nil {
		if *req.MaxRetries < 0 || *req.MaxRetries > maxMaxRetries {
			return bad("max_retries", "must be between 0 and %d", maxMaxRetries)
		}
		p.MaxRetries = *req.MaxRetries
	}

	if req.TimeoutSeconds != nil {
		if *req.TimeoutSeconds < 0 || *req.TimeoutSeconds > maxTimeoutSeconds {
			return bad("timeout_seconds", "must be between 0 (no timeout) and %d", maxTimeoutSeconds)
		}
		p.TimeoutSeconds = *req.TimeoutSeconds
	}

	if req.RunAt != nil && req.DelaySeconds != nil {
		return bad("run_at", "give run_at or delay_seconds, not both")
	}
	if req.RunAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *req.RunAt)
		if err != nil {
			return bad("run_at", "must be an RFC 3339 time such as 2030-01-02T15:04:05Z")
		}
		t = t.UTC()
		p.RunAt = &t
	}
	if req.DelaySeconds != nil {
		if *req.DelaySeconds < 0 || *req.DelaySeconds > maxDelaySeconds {
			return bad("delay_seconds", "must be between 0 and %d", maxDelaySeconds)
		}
		p.Delay = time.Duration(*req.DelaySeconds) * time.Second
	}

	if req.IdempotencyKey != "" {
		if err := app.CheckIdempotencyKey(req.IdempotencyKey, prefix+"idempotency_key"); err != nil {
			return p, err
		}
		p.IdempotencyKey = req.IdempotencyKey
	}

	if req.ConcurrencyKey != "" {
		if msg := app.CheckText(req.ConcurrencyKey, wire.MaxLimitKeyLen); msg != "" {
			return bad("concurrency_key", "%s", msg)
		}
		p.ConcurrencyKey = req.ConcurrencyKey
	}

	if n := len(req.DependsOn) + len(req.DependsOnIndex); n > maxDependsOn {
		return bad("depends_on", "names %d jobs, at most %d are allowed", n, maxDependsOn)
	}
	for _, raw := range req.DependsOn {
		text := string(raw)
		var s string
		if json.Unmarshal(raw, &s) == nil {
			text = s
		}
		id, err := app.ParseID(text)
		if err != nil {
			return bad("depends_on", "%q is not a job id (a positive integer)", app.Truncate(text, 40))
		}
		p.DependsOn = append(p.DependsOn, id)
	}
	p.DependsOnIndex = req.DependsOnIndex

	// req was decoded by encoding/json (decodeObject, decodeBatch), so its
	// payload is valid JSON already; the rest of app.CheckPayload's rule
	// applies.
	payload, err := job.NormalizeDecodedJSON(req.Payload, maxPayload)
	if err != nil {
		return app.JobInsertParams{}, httpx.InvalidField(prefix+"payload", "%s", err.Error())
	}
	p.Payload = payload

	if p.Unique, err = validateUnique(req, prefix); err != nil {
		return app.JobInsertParams{}, err
	}
	return p, nil
}

// validateUnique checks the unique_* fields of a request: nil when the job
// is not unique (no unique_for). prefix is validateSubmit's.
func validateUnique(req *wire.SubmitRequest, prefix string) (*app.Unique, error) {
	bad := func(field, format string, args ...any) (*app.Unique, error) {
		return nil, httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidUnique, "%s%s: %s", prefix, field, fmt.Sprintf(format, args...))
	}
	if req.UniqueFor == nil {
		switch {
		case req.UniqueStates != nil:
			return bad("unique_states", "only with unique_for")
		case req.UniqueKey != "":
			return bad("unique_key", "only with unique_for")
		}
		return nil, nil
	}
	if n := *req.UniqueFor; n < 1 || n > maxUniqueFor {
		return bad("unique_for", "must be between 1 and %d seconds", maxUniqueFor)
	}
	u := &app.Unique{For: time.Duration(*req.UniqueFor) * time.Second, Key: req.UniqueKey}
	if req.UniqueStates != nil {
		if len(req.UniqueStates) == 0 {
			return bad("unique_states", "must name at least one state (or be left out for the default)")
		}
		for _, name := range req.UniqueStates {
			st := job.State(name)
			if !slices.Contains(job.States, st) {
				return bad("unique_states", "%q is not a job state; use %s", app.Truncate(name, 40), app.StatesList())
			}
			if !slices.Contains(u.States, st) {
				u.States = append(u.States, st)
			}
		}
	}
	if req.UniqueKey != "" {
		if msg := app.CheckText(req.UniqueKey, maxUniqueKeyLen); msg != "" {
			return bad("unique_key", "%s", msg)
		}
	}
	return u, nil
}
