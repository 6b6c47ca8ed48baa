package submitter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter"
)

var (
	jwtSecret = []byte("test-secret-test-secret-test-secret!")
	jwtIssuer = "dts-test"
)

func withAuth(c *submitter.Config) {
	c.Auth = auth.Config{JWTSecret: jwtSecret, JWTIssuer: jwtIssuer, APIKeys: true}
}

// jwtFor signs an HS256 token for scope, changed by mods.
func jwtFor(t *testing.T, scope string, mods ...func(jwt.MapClaims)) string {
	t.Helper()
	c := jwt.MapClaims{"sub": "alice", "iss": jwtIssuer, "exp": time.Now().Add(time.Hour).Unix(), "scope": scope}
	for _, m := range mods {
		m(c)
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(jwtSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// apiKey creates an API key straight in the database.
func (e *env) apiKey(name string, scopes ...string) (key string, id string) {
	e.t.Helper()
	key, hash := auth.NewAPIKey()
	var n int64
	if err := e.db.QueryRow(e.t.Context(), `INSERT INTO api_keys (name, hash, scopes) VALUES ($1, $2, $3) RETURNING id`,
		name, hash, scopes).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return key, fmt.Sprint(n)
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

func errCode(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("not the JSON error shape: %q", body)
	}
	return e.Error.Code
}

// route is one API route and how to call it successfully.
type route struct {
	name          string
	method, scope string
	// prepare returns the path and body of a request that succeeds with
	// status ok given the right scope (it may create rows to act on).
	prepare func(e *env) (path, body string)
	ok      int
}

func newJobID(e *env) string {
	e.t.Helper()
	var id int64
	if err := e.db.QueryRow(e.t.Context(), `INSERT INTO jobs (name) VALUES ('x') RETURNING id`).Scan(&id); err != nil {
		e.t.Fatal(err)
	}
	return fmt.Sprint(id)
}

func fixed(path, body string) func(*env) (string, string) {
	return func(*env) (string, string) { return path, body }
}

var routes = []route{
	{"POST /submit_job", "POST", "submit", fixed("/submit_job", `{"name":"email"}`), 201},
	{"POST /jobs", "POST", "submit", fixed("/jobs", `{"type":"email"}`), 201},
	{"POST /submit_jobs", "POST", "submit", fixed("/submit_jobs", `[{"name":"email"}]`), 201},
	{"GET /jobs", "GET", "read", fixed("/jobs", ""), 200},
	{"GET /jobs/{id}", "GET", "read", func(e *env) (string, string) { return "/jobs/" + newJobID(e), "" }, 200},
	{"GET /jobs/{id}/timeline", "GET", "read", func(e *env) (string, string) { return "/jobs/" + newJobID(e) + "/timeline", "" }, 200},
	{"GET /stats", "GET", "read", fixed("/stats", ""), 200},
	{"GET /dlq", "GET", "read", fixed("/dlq", ""), 200},
	{"POST /jobs/{id}/cancel", "POST", "admin", func(e *env) (string, string) { return "/jobs/" + newJobID(e) + "/cancel", "" }, 200},
	{"POST /dlq/{id}/requeue", "POST", "admin", func(e *env) (string, string) {
		id := newJobID(e)
		e.exec(`UPDATE jobs SET status = 'failed', finished_at = now(), dead_reason = 'max_retries_exceeded' WHERE id = $1`, id)
		return "/dlq/" + id + "/requeue", ""
	}, 200},
	{"POST /admin/tokens", "POST", "admin", fixed("/admin/tokens", `{"name":"new","scopes":["read"]}`), 201},
	{"GET /admin/tokens", "GET", "admin", fixed("/admin/tokens", ""), 200},
	{"DELETE /admin/tokens/{id}", "DELETE", "admin", func(e *env) (string, string) { _, id := e.apiKey("victim", "read"); return "/admin/tokens/" + id, "" }, 200},
	{"GET /admin/audit", "GET", "admin", fixed("/admin/audit", ""), 200},
	{"POST /api/tasks", "POST", "submit", fixed("/api/tasks", `{"type":"email"}`), 202},
	{"GET /api/tasks/{id}", "GET", "read", func(e *env) (string, string) { return "/api/tasks/" + newJobID(e), "" }, 200},
	{"POST /addJob", "POST", "submit", fixed("/addJob", `{"name":"email"}`), 200},
	{"GET /failedJobs", "GET", "read", fixed("/failedJobs?page=1&limit=10", ""), 200},
	{"GET /schedules", "GET", "read", fixed("/schedules", ""), 200},
	{"GET /schedules/{id}", "GET", "read", func(e *env) (string, string) { return "/schedules/" + newScheduleID(e), "" }, 200},
	{"POST /schedules", "POST", "admin", func(e *env) (string, string) {
		return "/schedules", `{"name":"s` + newScheduleID(e) + `","cron":"@daily","job":{"name":"x"}}`
	}, 201},
	{"POST /schedules/{id}/pause", "POST", "admin", func(e *env) (string, string) { return "/schedules/" + newScheduleID(e) + "/pause", "" }, 200},
	{"POST /schedules/{id}/resume", "POST", "admin", func(e *env) (string, string) { return "/schedules/" + newScheduleID(e) + "/resume", "" }, 200},
	{"POST /schedules/{id}/trigger", "POST", "admin", func(e *env) (string, string) { return "/schedules/" + newScheduleID(e) + "/trigger", "" }, 201},
	{"DELETE /schedules/{id}", "DELETE", "admin", func(e *env) (string, string) { return "/schedules/" + newScheduleID(e), "" }, 200},
}

// wrongScope is a scope that does not grant a route's.
var wrongScope = map[string]string{"submit": "read", "read": "submit", "admin": "submit read"}

// TestAuthPerRoute runs every auth case against every route of the real
// handler, with a real database.
func TestAuthPerRoute(t *testing.T) {
	t.Parallel()
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, withAuth)
			revokedKey, revokedID := e.apiKey("revoked", "admin")
			e.exec(`UPDATE api_keys SET revoked_at = now() WHERE id = $1`, revokedID)
			expiredKey, expiredID := e.apiKey("expired", "admin")
			e.exec(`UPDATE api_keys SET expires_at = now() - interval '1 minute' WHERE id = $1`, expiredID)
			rightKey, _ := e.apiKey("right", rt.scope)
			wrongKey, _ := e.apiKey("wrong", strings.Fields(wrongScope[rt.scope])...)
			adminKey, _ := e.apiKey("admin", "admin")
			none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, rt.scope)

			cases := []struct {
				name    string
				headers []string
				status  int
				code    string
			}{
				{"no token", nil, 401, wire.CodeUnauthorized},
				{"not bearer", []string{"Authorization", "Basic YWRtaW46YWRtaW4="}, 401, wire.CodeUnauthorized},
				{"bad signature", bearer(sign(t, jwt.SigningMethodHS256, []byte("wrong-secret-wrong-secret-wrong!!"), rt.scope)), 401, wire.CodeUnauthorized},
				{"expired jwt", bearer(jwtFor(t, rt.scope, func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })), 401, wire.CodeUnauthorized},
				{"wrong issuer", bearer(jwtFor(t, rt.scope, func(c jwt.MapClaims) { c["iss"] = "someone-else" })), 401, wire.CodeUnauthorized},
				{"alg none", bearer(none), 401, wire.CodeUnauthorized},
				{"revoked key", bearer(revokedKey), 401, wire.CodeUnauthorized},
				{"expired key", bearer(expiredKey), 401, wire.CodeUnauthorized},
				{"unknown key", bearer(strings.Replace(rightKey, rightKey[5:9], "AAAA", 1)), 401, wire.CodeUnauthorized},
				{"wrong scope jwt", bearer(jwtFor(t, wrongScope[rt.scope])), 403, wire.CodeForbidden},
				{"wrong scope key", bearer(wrongKey), 403, wire.CodeForbidden},
				{"right scope jwt", bearer(jwtFor(t, rt.scope)), rt.ok, ""},
				{"right scope key", bearer(rightKey), rt.ok, ""},
				{"admin key", bearer(adminKey), rt.ok, ""},
			}
			for _, c := range cases {
				path, body := rt.prepare(e)
				status, b := e.do(rt.method, path, body, c.headers...)
				if status != c.status {
					t.Errorf("%s: %s %s = %d, want %d: %s", c.name, rt.method, path, status, c.status, b)
					continue
				}
				if c.code != "" && errCode(t, b) != c.code {
					t.Errorf("%s: code %q, want %q", c.name, errCode(t, b), c.code)
				}
			}
			// Nothing was created by a refused submission.
			if rt.scope == "submit" {
				if n := e.jobCount(); n != 3 {
					t.Errorf("%d jobs, want 3 (one per accepted request)", n)
				}
			}
		})
	}
}

func sign(t *testing.T, m jwt.SigningMethod, key any, scope string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, jwt.MapClaims{"sub": "mallory", "iss": jwtIssuer, "exp": time.Now().Add(time.Hour).Unix(), "scope": scope}).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAuthOpenRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	for _, p := range []string{"/healthz", "/health", "/readyz", "/metrics"} {
		if status, b := e.do("GET", p, ""); status != 200 {
			t.Errorf("GET %s without a token: %d %s", p, status, b)
		}
	}
	// Unknown routes answer 404 whether or not there is a token.
	if status, _ := e.do("GET", "/nope", ""); status != 404 {
		t.Errorf("GET /nope: %d", status)
	}
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestTokensNeverLogged captures every log line (debug level) of requests
// with good, bad, expired and revoked tokens, token creation included,
// and checks that no token or key appears in them.
func TestTokensNeverLogged(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	ctx := t.Context()
	dbURL := pgtest.NewDatabase(t)
	cfg := submitter.Config{DatabaseURL: dbURL, RedisURL: redistest.URL(), RedisPrefix: redistest.Prefix(t)}
	withAuth(&cfg)
	srv, err := submitter.New(ctx, cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	e := newEnvFrom(t, srv, dbURL)
	key, _ := e.apiKey("ci", "admin")
	good := jwtFor(t, "admin")
	expired := jwtFor(t, "admin", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })
	secrets := []string{key, good, expired, string(jwtSecret)}

	e.submit(`{"name":"email"}`, bearer(key)...)
	e.do("GET", "/jobs/1", "", bearer(good)...)
	e.do("GET", "/stats", "", bearer(expired)...)
	e.do("GET", "/nope", "", bearer(key)...)
	status, b := e.do("POST", "/admin/tokens", `{"name":"made","scopes":["read"]}`, bearer(good)...)
	var created wire.TokenCreated
	e.must(201, &created, status, b)
	secrets = append(secrets, created.Key)
	e.do("GET", "/jobs", "", bearer(created.Key)...)
	e.exec(`UPDATE api_keys SET revoked_at = now()`)
	e.do("GET", "/jobs", "", bearer(key[:len(key)-1]+"x")...)

	out := logs.String()
	if !strings.Contains(out, `"actor":"api_key:`) || !strings.Contains(out, `"code":"unauthorized"`) {
		t.Fatalf("the log does not show the requests (wrong level?):\n%s", out)
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("log contains a secret %q...:\n%s", s[:8], out)
		}
	}
	// Nor does the database hold a key in clear.
	if n := e.count(`SELECT count(*) FROM api_keys WHERE hash = $1 OR hash = $2`, key, created.Key); n != 0 {
		t.Error("a key is stored in clear")
	}
}

func TestRevokedKeyStopsWithinSeconds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	admin, _ := e.apiKey("admin", "admin")
	status, b := e.do("POST", "/admin/tokens", `{"name":"short-lived","scopes":["read"],"ttl":"1h"}`, bearer(admin)...)
	var created wire.TokenCreated
	e.must(201, &created, status, b)
	if created.ExpiresAt == nil || time.Until(*created.ExpiresAt) > time.Hour || !strings.HasPrefix(created.Key, "dts_") {
		t.Fatalf("created %+v", created)
	}
	if status, b := e.do("GET", "/stats", "", bearer(created.Key)...); status != 200 {
		t.Fatalf("new key: %d %s", status, b)
	}
	status, b = e.do("DELETE", "/admin/tokens/"+created.ID, "", bearer(admin)...)
	var revoked wire.Token
	e.must(200, &revoked, status, b)
	if revoked.RevokedAt == nil {
		t.Fatalf("revoked = %s", b)
	}
	testwait.For(t, auth.KeyCacheTTL+2*time.Second, "the revoked key to be refused", func() bool {
		status, _ := e.do("GET", "/stats", "", bearer(created.Key)...)
		return status == 401
	})
	// Listing shows it revoked, and never a key or hash.
	status, b = e.do("GET", "/admin/tokens", "", bearer(admin)...)
	var list wire.TokenListResponse
	e.must(200, &list, status, b)
	if len(list.Tokens) != 2 || list.Tokens[0].RevokedAt == nil || bytes.Contains(b, []byte("dts_")) || bytes.Contains(b, []byte(`"hash"`)) {
		t.Errorf("list = %s", b)
	}
	// Unknown and bad ids.
	if status, b := e.do("DELETE", "/admin/tokens/999", "", bearer(admin)...); status != 404 {
		t.Errorf("revoke unknown: %d %s", status, b)
	}
	for _, body := range []string{`{"name":"","scopes":["read"]}`, `{"name":"x","scopes":[]}`, `{"name":"x","scopes":["root"]}`,
		`{"name":"x","scopes":["read"],"ttl":"soon"}`, `{"name":"x","scopes":["read"],"ttl":"-1h"}`, `{"name":"x","scopes":["read"],"key":"mine"}`} {
		if status, b := e.do("POST", "/admin/tokens", body, bearer(admin)...); status != 400 {
			t.Errorf("POST /admin/tokens %s: %d %s", body, status, b)
		}
	}
}

func TestAuditLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	admin, adminID := e.apiKey("ops", "admin")
	id := newJobID(e)
	if status, b := e.do("POST", "/jobs/"+id+"/cancel", "", bearer(admin)...); status != 200 {
		t.Fatalf("cancel: %d %s", status, b)
	}
	if status, _ := e.do("POST", "/jobs/"+id+"/cancel", "", bearer(admin)...); status != 409 {
		t.Fatalf("second cancel: %d", status)
	}
	if status, _ := e.do("POST", "/dlq/999/requeue", "", bearer(jwtFor(t, "admin"))...); status != 404 {
		t.Fatalf("requeue unknown: %d", status)
	}
	status, b := e.do("POST", "/admin/tokens", `{"name":"ci","scopes":["submit"],"ttl":"0"}`, bearer(admin)...)
	var created wire.TokenCreated
	e.must(201, &created, status, b)
	if created.ExpiresAt != nil {
		t.Errorf("ttl 0 key expires at %v", created.ExpiresAt)
	}
	// A refused request writes nothing.
	if status, _ := e.do("POST", "/jobs/"+id+"/cancel", "", bearer(jwtFor(t, "read"))...); status != 403 {
		t.Fatalf("cancel with read scope: %d", status)
	}

	status, b = e.do("GET", "/admin/audit?limit=3", "", bearer(admin)...)
	var page wire.AuditListResponse
	e.must(200, &page, status, b)
	if len(page.Entries) != 3 || page.NextCursor == nil {
		t.Fatalf("page = %s", b)
	}
	status, b = e.do("GET", "/admin/audit?cursor="+*page.NextCursor, "", bearer(admin)...)
	var rest wire.AuditListResponse
	e.must(200, &rest, status, b)
	all := append(page.Entries, rest.Entries...)
	want := []struct{ actor, action, target, result string }{
		{"api_key:" + adminID + ":ops", "token.create", created.ID, ""},
		{"jwt:alice", "job.requeue", "999", "failed"},
		{"api_key:" + adminID + ":ops", "job.cancel", id, "failed"},
		{"api_key:" + adminID + ":ops", "job.cancel", id, "ok"},
	}
	if len(all) != len(want) {
		t.Fatalf("audit = %+v", all)
	}
	for i, w := range want {
		a := all[i]
		var d map[string]any
		_ = json.Unmarshal(a.Details, &d)
		if a.Actor != w.actor || a.Action != w.action || a.TargetID != w.target || (w.result != "" && d["result"] != w.result) {
			t.Errorf("audit[%d] = %+v %s, want %+v", i, a, a.Details, w)
		}
	}
	if status, _ := e.do("GET", "/admin/audit", "", bearer(jwtFor(t, "read submit"))...); status != 403 {
		t.Errorf("audit with read scope: %d", status)
	}
}

func TestRateLimit429(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth, func(c *submitter.Config) { c.RateLimitRPS, c.RateLimitBurst = 0.2, 3 })
	a, _ := e.apiKey("a", "read")
	b, _ := e.apiKey("b", "read")
	for i := range 3 {
		if status, body := e.do("GET", "/stats", "", bearer(a)...); status != 200 {
			t.Fatalf("request %d: %d %s", i, status, body)
		}
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", e.http.URL+"/stats", nil)
	req.Header.Set("Authorization", "Bearer "+a)
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "5" {
		t.Fatalf("over the limit: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Another token has its own bucket.
	if status, _ := e.do("GET", "/stats", "", bearer(b)...); status != 200 {
		t.Fatalf("other token: %d", status)
	}
	// Probes are not limited.
	for range 5 {
		if status, _ := e.do("GET", "/healthz", ""); status != 200 {
			t.Fatal("healthz limited")
		}
	}
}

// TestAuthOffByClientIP: with auth off, the limit is per client address.
func TestRateLimitWithoutAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *submitter.Config) { c.RateLimitRPS, c.RateLimitBurst = 0.2, 2 })
	for range 2 {
		if status, _ := e.do("GET", "/stats", ""); status != 200 {
			t.Fatal(status)
		}
	}
	status, b := e.do("GET", "/stats", "")
	if status != 429 || errCode(t, b) != wire.CodeRateLimited {
		t.Fatalf("%d %s", status, b)
	}
}

// fakeListener has an address of our choosing and accepts nothing.
type fakeListener struct{ addr net.Addr }

func (l fakeListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (l fakeListener) Close() error              { return nil }
func (l fakeListener) Addr() net.Addr            { return l.addr }

func TestNonLoopbackRefusedWithoutAuth(t *testing.T) {
	t.Parallel()
	base := submitter.Config{DatabaseURL: "postgres://x", RedisURL: "redis://x"}
	tests := []struct {
		name string
		cfg  func(*submitter.Config)
		ok   bool
	}{
		{"loopback", func(c *submitter.Config) { c.Addr = "127.0.0.1:0" }, true},
		{"all interfaces", func(c *submitter.Config) { c.Addr = "0.0.0.0:0" }, false},
		{"empty host", func(c *submitter.Config) { c.Addr = ":8000" }, false},
		{"insecure", func(c *submitter.Config) { c.Addr, c.InsecureNoAuth = "0.0.0.0:0", true }, true},
		{"auth", func(c *submitter.Config) { c.Addr = "0.0.0.0:0"; withAuth(c) }, true},
		{"short secret", func(c *submitter.Config) { c.Auth.JWTSecret = []byte("short") }, false},
	}
	for _, tt := range tests {
		cfg := base
		tt.cfg(&cfg)
		err := cfg.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: Validate = %v, want ok %v", tt.name, err, tt.ok)
		}
	}

	// Run checks its listener's real address too.
	e := newEnv(t)
	err := e.srv.Run(t.Context(), fakeListener{&net.TCPAddr{IP: net.IPv4zero, Port: 8000}})
	if err == nil || !strings.Contains(err.Error(), "insecure-no-auth") {
		t.Errorf("Run on 0.0.0.0 without auth = %v", err)
	}
}

func TestLoopbackWarning(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	cfg := submitter.Config{DatabaseURL: pgtest.NewDatabase(t), RedisURL: redistest.URL(), RedisPrefix: redistest.Prefix(t)}
	srv, err := submitter.New(t.Context(), cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	testwait.For(t, 5*time.Second, "the warning", func() bool { return strings.Contains(logs.String(), auth.LoopbackWarning) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
