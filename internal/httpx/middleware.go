package httpx

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dtsched/dts/internal/probe"
	"github.com/dtsched/dts/internal/wire"
)

// NewRouter returns a chi router with the standard middleware, outermost
// first: m's metrics (skipped when m is nil), Logger and Recover, and JSON
// answers for unknown routes (404 route_not_found) and methods (405
// method_not_allowed).
func NewRouter(logger *slog.Logger, m *Metrics) *chi.Mux {
	r := chi.NewRouter()
	if m != nil {
		r.Use(m.Middleware)
	}
	r.Use(Logger(logger), Recover)
	r.NotFound(NotFound)
	r.MethodNotAllowed(MethodNotAllowed)
	return r
}

// NotFound answers 404 route_not_found.
func NotFound(w http.ResponseWriter, r *http.Request) {
	WriteError(w, r, Errorf(http.StatusNotFound, wire.CodeRouteNotFound, "no route for %s %s", r.Method, r.URL.Path))
}

// MethodNotAllowed answers 405 method_not_allowed with an Allow header
// listing the methods the path has.
func MethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.Routes != nil {
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
			http.MethodPatch, http.MethodDelete, http.MethodOptions} {
			if rctx.Routes.Match(chi.NewRouteContext(), m, r.URL.Path) {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
		}
	}
	WriteError(w, r, Errorf(http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "method %s is not allowed on %s", r.Method, r.URL.Path))
}

// Healthz answers 200 {"status":"ok"}: the process is up and serving.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	WriteJSON(w, http.StatusOK, wire.StatusResponse{Status: "ok"})
}

// HealthzWith returns the /healthz handler of a service that says more
// about itself than Healthz (probe.Healthz).
func HealthzWith(details func() map[string]any) http.HandlerFunc { return probe.Healthz(details) }

// MetricsHandler serves g in the Prometheus exposition format (probe.Metrics).
func MetricsHandler(g prometheus.Gatherer, logger *slog.Logger) http.Handler {
	return probe.Metrics(g, logger)
}

// LimitBody limits request bodies to n bytes. A larger declared
// Content-Length is refused at once with 413 body_too_large; an undeclared
// one fails when the handler reads past n (ReadBody returns the error).
func LimitBody(n int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > n {
				WriteError(w, r, &http.MaxBytesError{Limit: n})
				return
			}
			if r.Body != nil {
				r.Body = http.MaxBytesReader(w, r.Body, n)
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Recover turns a panic in a handler into a 500 internal answer (if nothing
// was written yet) and hands the panic and its stack to Logger. It re-panics
// http.ErrAbortHandler, which net/http uses to abort a response on purpose.
func Recover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ww, ok := w.(middleware.WrapResponseWriter)
		if !ok {
			ww = middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { //nolint:errorlint // net/http compares it the same way
				panic(v)
			}
			err := fmt.Errorf("panic: %v\n%s", v, debug.Stack())
			if ww.Status() == 0 && ww.BytesWritten() == 0 {
				WriteError(ww, r, err)
				return
			}
			// Too late to answer; make sure the panic is logged anyway.
			if st := stateFrom(r.Context()); st != nil {
				st.err = err
			} else {
				logFallback(r, err)
			}
		}()
		next.ServeHTTP(ww, r)
	})
}

// requestState carries what a handler learned back to Logger.
type requestState struct {
	code  string // the error code answered, if any
	err   error  // the error behind a 5xx, for the log only
	actor string // who the request came from (auth.Principal.Actor), once authenticated
}

type stateKey struct{}

func stateFrom(ctx context.Context) *requestState {
	st, _ := ctx.Value(stateKey{}).(*requestState)
	return st
}

// Logger logs one line per request once it is answered: method, route
// pattern, path, status, duration, response size, the actor (a token's id
// and name, never the token) once Authenticate has named it, and the error
// code of a 4xx or 5xx, plus the internal error behind a 5xx. Bodies, query
// strings and headers (so Authorization) are never logged. Levels: 5xx error, 4xx info, others debug
// (so a busy API is quiet at the default info level).
func Logger(logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			st := &requestState{}
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			r = r.WithContext(context.WithValue(r.Context(), stateKey{}, st))
			next.ServeHTTP(ww, r)

			status := statusOf(ww)
			level := slog.LevelDebug
			switch {
			case status == http.StatusServiceUnavailable && (st.code == wire.CodeOverloaded || st.code == wire.CodeBacklogFull ||
				st.code == wire.CodeNotLeader):
				// Load shed on purpose, possibly thousands a second, or a
				// standby coordinator doing its job: the metrics count
				// them; the log is for failures.
				level = slog.LevelInfo
			case status >= 500:
				level = slog.LevelError
			case status >= 400:
				level = slog.LevelInfo
			}
			if !logger.Enabled(r.Context(), level) {
				return
			}
			attrs := []slog.Attr{
				slog.String("method", r.Method),
				slog.String("route", routePattern(r)),
				slog.String("path", truncate(r.URL.Path, 200)),
				slog.Int("status", status),
				slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
				slog.Int("bytes", ww.BytesWritten()),
			}
			if st.actor != "" {
				attrs = append(attrs, slog.String("actor", truncate(st.actor, 200)))
			}
			if st.code != "" {
				attrs = append(attrs, slog.String("code", st.code))
			}
			if st.err != nil {
				attrs = append(attrs, slog.String("error", st.err.Error()))
			}
			logger.LogAttrs(r.Context(), level, "http request", attrs...)
		})
	}
}

// truncate bounds a logged string that comes from the client.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// logFallback logs a 5xx's error when no Logger middleware is installed.
func logFallback(r *http.Request, err error) {
	slog.Default().LogAttrs(r.Context(), slog.LevelError, "http request failed",
		slog.String("method", r.Method), slog.String("path", truncate(r.URL.Path, 200)), slog.String("error", err.Error()))
}

// Metrics holds the HTTP metrics of one server.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics creates and registers http_requests_total{route,method,code}
// and http_request_duration_seconds{route,method} on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total",
			Help: "HTTP requests answered, by chi route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "http_request_duration_seconds",
			Help:    "Time to answer HTTP requests, by chi route pattern and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// Middleware records each request in m. Requests that match no route are
// labelled route="unmatched" so that scans cannot grow the label set.
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route, method := routePattern(r), methodLabel(r.Method)
		m.requests.WithLabelValues(route, method, strconv.Itoa(statusOf(ww))).Inc()
		m.duration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
	})
}

// routePattern is the chi pattern the request matched ("/jobs/{id}"), or
// "unmatched".
func routePattern(r *http.Request) string {
	if rctx := chi.RouteContext(r.Context()); rctx != nil {
		if p := rctx.RoutePattern(); p != "" && p != "/*" {
			return p
		}
	}
	return "unmatched"
}

// methodLabel bounds the method label to the standard methods.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "OTHER"
}

// statusOf is the status written, 200 if the handler wrote nothing.
func statusOf(ww middleware.WrapResponseWriter) int {
	if s := ww.Status(); s != 0 {
		return s
	}
	return http.StatusOK
}
