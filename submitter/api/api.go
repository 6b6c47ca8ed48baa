// Package api is the submitter's HTTP JSON API: one route table
// (routes.go) and the handlers of each resource, in a file named like the
// client's, over the application (package app) alone.
//
// Why it is shaped this way: a handler only decodes and checks its
// request, calls the application and writes the answer; it never reaches
// the store. Every route decodes and validates its whole input before the
// application touches the database, so bad input writes nothing; handlers
// return errors and httpx.Classify alone turns them into answers.
//
// Input rules (docs/api.md is the API reference): bodies are
// JSON whatever the Content-Type says (curl -d sends a form type); unknown
// fields are refused with 400 invalid_field, so a typo such as "max_retry"
// is reported instead of silently ignored; field names match
// case-insensitively and a repeated key keeps its last value
// (encoding/json's rules).
//
// What must stay true:
//   - A request is validated completely before any write; a batch is
//     inserted by one statement, all or nothing.
//   - Every route is behind httpx.Authenticate and a scope (submit, read
//     or admin; routes lists them).
package api

import (
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/app"
)

// Config configures the API. The submitter's Config holds the defaults.
type Config struct {
	MaxBodyBytes          int64 // a request body, but POST /submit_jobs's
	MaxBatchBodyBytes     int64 // the body of POST /submit_jobs
	MaxPayloadBytes       int   // one job's payload
	MaxConcurrentRequests int   // requests served at once
	// MaxInflightBodyBytes bounds the request body bytes in progress
	// (httpx.BodyBudget); < 1: no bound.
	MaxInflightBodyBytes int64
	// Authn checks bearer tokens; nil: auth is off.
	Authn httpx.Authenticator
	// Failures limits failed authentications per client IP.
	Failures *httpx.RateLimiter
	// Limiter limits each caller's requests; nil: no limit.
	Limiter *httpx.RateLimiter
}

// API is the JSON API over an App.
type API struct {
	app *app.App
	cfg Config
}

// New returns the API over a.
func New(a *app.App, cfg Config) *API { return &API{app: a, cfg: cfg} }

// List limits.
const (
	defaultListLimit = 50
	maxListLimit     = 1000
)

// pathID parses the {id} route parameter: a positive 64-bit integer.
func pathID(r *http.Request) (int64, error) {
	raw := chi.URLParam(r, "id")
	id, err := app.ParseID(raw)
	if err != nil {
		return 0, httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidID, "job id must be a positive integer, got %q", app.Truncate(raw, 40))
	}
	return id, nil
}

// queryPage parses ?limit= (queryLimit) and an id ?cursor= from a
// previous answer's next_cursor (0 when absent): the paging of every
// listing ordered by id, newest first.
func queryPage(r *http.Request) (limit int, before int64, err error) {
	if limit, err = queryLimit(r); err != nil {
		return 0, 0, err
	}
	if c := r.URL.Query().Get("cursor"); c != "" {
		if before, err = app.ParseID(c); err != nil {
			return 0, 0, httpx.InvalidField("cursor", "not a cursor from next_cursor")
		}
	}
	return limit, before, nil
}

// queryLimit parses ?limit=, 1..maxListLimit, default defaultListLimit.
func queryLimit(r *http.Request) (int, error) {
	raw := r.URL.Query().Get("limit")
	if raw == "" {
		return defaultListLimit, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > maxListLimit {
		return 0, httpx.InvalidField("limit", "must be an integer between 1 and %d", maxListLimit)
	}
	return n, nil
}
