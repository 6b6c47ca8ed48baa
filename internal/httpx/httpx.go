// Package httpx is the HTTP plumbing shared by the submitter's API and the
// small health and metrics servers of the coordinator and the worker: JSON
// reading and writing, the error type handlers return, and chi middleware
// (panic recovery, request logging, Prometheus metrics, body size limits,
// bearer-token authentication and scopes, per-caller rate limits and a cap
// on requests in progress).
//
// Why it is shaped this way: handlers return an error instead of writing
// one, and a single function, Classify, turns every error into a status and
// a stable code (wire.Code*, and the Code* of this package for auth and
// overload). So no handler can answer a 4xx or 5xx in any shape other than
// {"error": {"code": ..., "message": ...}}, and an error is
// either shown to the client (an *Error or a sentinel of package job) or
// logged with the request line, never both and never lost.
//
// What must stay true:
//   - A 5xx message never carries an internal error's text; the details go
//     to the request log line only (see Logger).
//   - Metrics are labelled by chi's route pattern, never by the raw path,
//     so label cardinality is bounded by the number of routes.
//   - Nothing here reads a body into the log, nor a header: the
//     Authorization header is read by Authenticate only and never logged.
package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/probe"
	"github.com/dtsched/dts/internal/wire"
)

// Error is an error meant for the client: it becomes the answer's status
// and its {"error": {"code", "message"}} body as is.
type Error struct {
	Status  int    // HTTP status, 4xx or 5xx
	Code    string // stable code, one of wire.Code*
	Message string // for people; names the offending field when there is one
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf returns an *Error with a formatted message.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidField returns a 400 invalid_field error whose message starts with
// the field's name: "priority: must be between -1000 and 1000".
func InvalidField(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: wire.CodeInvalidField,
		Message: field + ": " + fmt.Sprintf(format, args...)}
}

// StoreRetryAfter is the Retry-After, in seconds, of a 503
// store_unavailable: a PostgreSQL restart takes a few seconds.
const StoreRetryAfter = "1"

// StatusClientClosedRequest is nginx's status for a request whose client
// went away before the answer; it shows in logs and metrics only.
const StatusClientClosedRequest = 499

// Classify maps any error to the status and body of its answer. It is the
// one place where errors become HTTP:
//
//	*Error                   its own status, code and message
//	*http.MaxBytesError      413 body_too_large
//	job.ErrNotFound          404 not_found
//	job.ErrConflict          409 conflict
//	context.Canceled         499 canceled (the client went away; nobody reads it)
//	job.ErrStoreUnavailable  503 store_unavailable, with Retry-After (WriteError sets it)
//	context.DeadlineExceeded 503 unavailable
//	anything else            500 internal, with a generic message
func Classify(err error) (int, wire.ErrorBody) {
	var e *Error
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &e):
		return e.Status, wire.ErrorBody{Code: e.Code, Message: e.Message}
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, wire.ErrorBody{Code: wire.CodeBodyTooLarge,
			Message: fmt.Sprintf("request body is larger than %d bytes", tooLarge.Limit)}
	case errors.Is(err, job.ErrNotFound):
		return http.StatusNotFound, wire.ErrorBody{Code: wire.CodeNotFound, Message: err.Error()}
	case errors.Is(err, job.ErrConflict):
		return http.StatusConflict, wire.ErrorBody{Code: wire.CodeConflict, Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return StatusClientClosedRequest, wire.ErrorBody{Code: wire.CodeCanceled, Message: "request canceled"}
	case errors.Is(err, job.ErrStoreUnavailable):
		return http.StatusServiceUnavailable, wire.ErrorBody{Code: wire.CodeStoreUnavailable,
			Message: "the database is unavailable; retry later"}
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, wire.ErrorBody{Code: wire.CodeUnavailable,
			Message: "the request timed out; retry later"}
	default:
		return http.StatusInternalServerError, wire.ErrorBody{Code: wire.CodeInternal, Message: "internal error"}
	}
}

// Handler adapts a handler that returns an error: a non-nil error is
// written with WriteError (the handler must not have written anything then).
func Handler(fn func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			WriteError(w, r, err)
		}
	}
}

// WriteError answers with err as Classify maps it. For a 5xx the error is
// handed to the Logger middleware, which logs it with the request line
// (without that middleware it goes to slog.Default).
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := Classify(err)
	if body.Code == wire.CodeStoreUnavailable {
		w.Header().Set("Retry-After", StoreRetryAfter)
	}
	if st := stateFrom(r.Context()); st != nil {
		st.code = body.Code
		if status >= 500 {
			st.err = err
		}
	} else if status >= 500 {
		logFallback(r, err)
	}
	WriteJSON(w, status, wire.ErrorResponse{Error: body})
}

// WriteJSON answers with status and v as JSON (probe.WriteJSON). If v
// cannot be encoded it answers 500 internal instead.
func WriteJSON(w http.ResponseWriter, status int, v any) { probe.WriteJSON(w, status, v) }

// maxBodyPrealloc bounds the buffer ReadBody sizes from Content-Length, so
// that a route without LimitBody cannot be made to allocate what a client
// only announces.
const maxBodyPrealloc = 32 << 20

// ReadBody reads the whole request body. Put LimitBody in front of the
// route: a body over the limit gives a 413 body_too_large error.
func ReadBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	var b []byte
	var err error
	if n := r.ContentLength; n > 0 && n <= maxBodyPrealloc {
		// Read into a buffer of the announced size (LimitBody refused a
		// larger one) instead of one grown by doubling, which copied a
		// large batch several times over.
		b = make([]byte, n)
		_, err = io.ReadFull(r.Body, b)
	} else {
		b, err = io.ReadAll(r.Body)
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, err
		}
		return nil, Errorf(http.StatusBadRequest, wire.CodeInvalidJSON, "read request body: %v", err)
	}
	return b, nil
}

// DecodeStrict decodes data, which must hold exactly one JSON value, into
// v, rejecting fields v does not have. Errors are *Error: invalid_json for
// malformed JSON, a wrong top-level shape or trailing data; invalid_field,
// naming the field, for a field of the wrong type or an unknown field.
// Field names match case-insensitively (encoding/json's rule) and, for a
// repeated key, the last one wins.
func DecodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(http.StatusBadRequest, wire.CodeInvalidJSON, "unexpected data after the JSON value at byte offset %d", dec.InputOffset())
	}
	return nil
}

// jsonError turns an encoding/json error into an *Error.
func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var invalid *json.InvalidUnmarshalError
	switch {
	case errors.As(err, &invalid):
		return fmt.Errorf("decode json: %w", err) // a bug of the caller: 500
	case errors.Is(err, io.EOF):
		return Errorf(http.StatusBadRequest, wire.CodeInvalidJSON, "request body is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(http.StatusBadRequest, wire.CodeInvalidJSON, "request body is truncated JSON")
	case errors.As(err, &syntax):
		return Errorf(http.StatusBadRequest, wire.CodeInvalidJSON, "invalid JSON at byte offset %d: %s",
			syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return Errorf(http.StatusBadRequest, wire.CodeInvalidJSON, "request body must be %s, not %s",
				jsonKind(typ.Type.String()), typ.Value)
		}
		return InvalidField(typ.Field, "must be %s, not %s", jsonKind(typ.Type.String()), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return InvalidField(strings.Trim(name, `"`), "unknown field")
	}
	return Errorf(http.StatusBadRequest, wire.CodeInvalidJSON, "%s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(goType string) string {
	goType = strings.TrimLeft(goType, "*")
	switch {
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		return "an object"
	}
	return goType
}
