package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/wire"
)

// Error is an error answer (4xx or 5xx) from the API.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is the API's stable error code (docs/api.md#errors), such as
	// "not_found"; empty when the answer was not the API's JSON error (a
	// proxy's page, for example).
	Code string
	// Message is the server's explanation, for people.
	Message string
	// RetryAfter is the wait the server asked for, or 0.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	code := e.Code
	if code == "" {
		code = http.StatusText(e.Status)
	}
	if e.Message == "" {
		return fmt.Sprintf("dts: %d %s", e.Status, code)
	}
	return fmt.Sprintf("dts: %d %s: %s", e.Status, code, e.Message)
}

// Is makes errors.Is(err, ErrNotFound) and the like true for an *Error with
// the sentinel's Code. A sentinel with no Code matches by Status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t.Code != "" {
		return t.Code == e.Code
	}
	return t.Status != 0 && t.Status == e.Status
}

// Sentinels to test an error with errors.Is; each matches the API code of
// the same name (docs/api.md#errors).
var (
	ErrInvalidJSON       = &Error{Status: 400, Code: wire.CodeInvalidJSON}
	ErrInvalidField      = &Error{Status: 400, Code: wire.CodeInvalidField}
	ErrInvalidID         = &Error{Status: 400, Code: wire.CodeInvalidID}
	ErrInvalidUnique     = &Error{Status: 400, Code: wire.CodeInvalidUnique}
	ErrInvalidLimit      = &Error{Status: 400, Code: wire.CodeInvalidLimit}
	ErrUnknownDependency = &Error{Status: 400, Code: wire.CodeUnknownDependency}
	ErrUnknownJobName    = &Error{Status: 400, Code: wire.CodeUnknownJobName}
	ErrUnauthorized      = &Error{Status: 401, Code: codeUnauthorized}
	ErrForbidden         = &Error{Status: 403, Code: codeForbidden}
	ErrNotFound          = &Error{Status: 404, Code: wire.CodeNotFound}
	ErrRouteNotFound     = &Error{Status: 404, Code: wire.CodeRouteNotFound}
	ErrMethodNotAllowed  = &Error{Status: 405, Code: wire.CodeMethodNotAllowed}
	ErrConflict          = &Error{Status: 409, Code: wire.CodeConflict}
	ErrBodyTooLarge      = &Error{Status: 413, Code: wire.CodeBodyTooLarge}
	ErrRateLimited       = &Error{Status: 429, Code: codeRateLimited}
	ErrInternal          = &Error{Status: 500, Code: wire.CodeInternal}
	ErrOverloaded        = &Error{Status: 503, Code: codeOverloaded}
	ErrBacklogFull       = &Error{Status: 503, Code: wire.CodeBacklogFull}
	ErrStoreUnavailable  = &Error{Status: 503, Code: wire.CodeStoreUnavailable}
	ErrUnavailable       = &Error{Status: 503, Code: wire.CodeUnavailable}
)

// The authentication and admission codes are defined by internal/httpx,
// which this package does not import (it would bring chi and the JWT
// library into every client); client/integration checks they agree.
const (
	codeUnauthorized = "unauthorized"
	codeForbidden    = "forbidden"
	codeRateLimited  = "rate_limited"
	codeOverloaded   = "overloaded"
)

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// newError builds the *Error of an answer with status >= 400 from its
// (bounded) body and headers.
func newError(resp *http.Response, body []byte, now time.Time) *Error {
	e := &Error{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), now)}
	var er wire.ErrorResponse
	if json.Unmarshal(body, &er) == nil && er.Error.Code != "" {
		e.Code, e.Message = er.Error.Code, er.Error.Message
		return e
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	e.Message = msg
	return e
}

// retryAfter parses a Retry-After header: whole seconds or an HTTP date.
// It returns 0 when the header is absent or unusable.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		if s > int64(24*time.Hour/time.Second) {
			s = int64(24 * time.Hour / time.Second)
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
