package submitter_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	redistest.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests passed: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// env is one submitter on its own database and Redis key prefix, with
// direct connections for the test to look behind the API.
type env struct {
	t      *testing.T
	srv    *submitter.Server
	http   *httptest.Server
	db     *pgxpool.Pool
	rdb    *redis.Client
	prefix string
}

func newEnv(t *testing.T, configure ...func(*submitter.Config)) *env {
	t.Helper()
	ctx := t.Context()
	dbURL := pgtest.NewDatabase(t)
	prefix := redistest.Prefix(t)
	cfg := submitter.Config{DatabaseURL: dbURL, RedisURL: redistest.URL(), RedisPrefix: prefix}
	for _, f := range configure {
		f(&cfg)
	}
	srv, err := submitter.New(ctx, cfg, testLogger(t))
	if err != nil {
		t.Fatalf("submitter.New: %v", err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	e := newEnvFrom(t, srv, dbURL)
	e.prefix = prefix
	return e
}

// newEnvFrom wraps a server the test built itself.
func newEnvFrom(t *testing.T, srv *submitter.Server, dbURL string) *env {
	t.Helper()
	ctx := t.Context()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	db, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return &env{t: t, srv: srv, http: hs, db: db, rdb: rdb}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// do sends a request over HTTP; headers come in name, value pairs.
func (e *env) do(method, path, body string, headers ...string) (int, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.http.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// doLocal sends a request straight to the handler, without a network: for
// bodies so large that the server hangs up before the client has sent them.
func (e *env) doLocal(method, path string, body []byte, headers ...string) (int, []byte) {
	e.t.Helper()
	req := httptest.NewRequestWithContext(e.t.Context(), method, path, bytes.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// must decodes a successful answer with the expected status into v.
func (e *env) must(wantStatus int, v any, status int, body []byte) {
	e.t.Helper()
	if status != wantStatus {
		e.t.Fatalf("status %d, want %d: %s", status, wantStatus, body)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			e.t.Fatalf("decode %s: %v", body, err)
		}
	}
}

func (e *env) submit(body string, headers ...string) wire.SubmitResponse {
	e.t.Helper()
	var r wire.SubmitResponse
	status, b := e.do("POST", "/submit_job", body, headers...)
	e.must(http.StatusCreated, &r, status, b)
	return r
}

func (e *env) getJob(id string) wire.Job {
	e.t.Helper()
	var j wire.Job
	status, b := e.do("GET", "/jobs/"+id, "")
	e.must(http.StatusOK, &j, status, b)
	return j
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Exec(e.t.Context(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRow(e.t.Context(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (e *env) jobCount() int { return e.count(`SELECT count(*) FROM jobs`) }
