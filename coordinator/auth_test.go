package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dtsched/dts/coordinator"
	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
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

// running is one in-process coordinator on its own database and key prefix.
type running struct {
	t     *testing.T
	url   string // http://127.0.0.1:port
	dbURL string
	db    *pgxpool.Pool
	q     *queue.Queue
	rdb   *redis.Client
	keys  queue.Keys
}

func start(t *testing.T, configure func(*coordinator.Config)) *running {
	t.Helper()
	ctx := t.Context()
	dbURL := pgtest.NewDatabase(t)
	prefix := redistest.Prefix(t)
	cfg := coordinator.Config{ID: "c1", DatabaseURL: dbURL, RedisURL: redistest.URL(), RedisPrefix: prefix,
		HeartbeatInterval: 100 * time.Millisecond, LeaseDuration: 5 * time.Second, ElectionInterval: 100 * time.Millisecond}
	if configure != nil {
		configure(&cfg)
	}
	c, err := coordinator.New(ctx, cfg, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	q, err := queue.Open(ctx, redistest.URL(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	db, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	opt, _ := redis.ParseURL(redistest.URL())
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	r := &running{t: t, url: "http://" + ln.Addr().String(), dbURL: dbURL, db: db, q: q, rdb: rdb, keys: queue.Keys{Prefix: prefix}}
	r.eventually("leadership", func() bool {
		var h struct{ Role string }
		r.getJSON("/healthz", "", &h)
		return h.Role == "leader"
	})
	return r
}

func (r *running) get(path, token string) (int, []byte) {
	r.t.Helper()
	req, _ := http.NewRequestWithContext(r.t.Context(), "GET", r.url+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (r *running) getJSON(path, token string, v any) int {
	r.t.Helper()
	status, b := r.get(path, token)
	if status == 200 {
		if err := json.Unmarshal(b, v); err != nil {
			r.t.Fatalf("%s: %v: %s", path, err, b)
		}
	}
	return status
}

// workers returns worker id → state as /workers shows it.
func (r *running) workers(token string) map[string]string {
	r.t.Helper()
	var out struct {
		Workers []struct {
			ID    string `json:"worker_id"`
			State string `json:"state"`
		} `json:"workers"`
	}
	if status := r.getJSON("/workers", token, &out); status != 200 {
		r.t.Fatalf("/workers: %d", status)
	}
	m := map[string]string{}
	for _, w := range out.Workers {
		m[w.ID] = w.State
	}
	return m
}

// metric returns the value of one sample line of /metrics, 0 if absent.
func (r *running) metric(series string) float64 {
	r.t.Helper()
	_, b := r.get("/metrics", "")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			_ = json.Unmarshal([]byte(v), &f)
			return f
		}
	}
	return 0
}

func (r *running) eventually(what string, cond func() bool) {
	r.t.Helper()
	testwait.For(r.t, 15*time.Second, what, cond)
}

// heartbeats sends a heartbeat for each worker every 100ms until the test ends.
func (r *running) heartbeats(hbs ...wire.Heartbeat) (stop func()) {
	ctx, cancel := context.WithCancel(r.t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			for _, hb := range hbs {
				hb.SentAt = time.Now()
				_ = r.q.SendHeartbeat(ctx, hb)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	stop = func() { cancel(); wg.Wait() }
	r.t.Cleanup(stop)
	return stop
}

func hb(id, credential string) wire.Heartbeat {
	return wire.Heartbeat{WorkerID: id, JobTypes: []string{"*"}, Concurrency: 1, Credential: credential}
}

func TestWorkerCredentials(t *testing.T) {
	t.Parallel()
	yes := true
	r := start(t, func(c *coordinator.Config) { c.Auth.RequireWorkerCredentials = &yes })
	admin, err := coordinator.OpenCredentialAdmin(t.Context(), r.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	good, _, err := admin.Create(t.Context(), "test", "w-good")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := admin.Create(t.Context(), "test", "w-other")
	if err != nil {
		t.Fatal(err)
	}
	marker, _, err := admin.Create(t.Context(), "test", "w-marker")
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := auth.NewWorkerCredential()
	stop := r.heartbeats(
		hb("w-good", good),
		hb("w-none", ""),
		hb("w-stolen", other), // another worker's credential
		hb("w-forged", forged),
		hb("w-junk", "hunter2"),
	)
	r.eventually("w-good registered", func() bool { return r.workers("")["w-good"] == "available" })
	r.eventually("refusals counted", func() bool {
		return r.metric(`dts_worker_auth_failures_total{reason="missing"}`) >= 1 &&
			r.metric(`dts_worker_auth_failures_total{reason="invalid"}`) >= 3
	})
	if ws := r.workers(""); len(ws) != 1 {
		t.Fatalf("workers = %v, want only w-good", ws)
	}

	// A forged "stopped" heartbeat for w-good changes nothing. Heartbeats
	// are read in the order they reach Redis, so once a worker that beats
	// after it is registered, the forged stop has been read.
	bad := hb("w-good", forged)
	bad.Stopped = true
	for _, h := range []wire.Heartbeat{bad, hb("w-marker", marker)} {
		if err := r.q.SendHeartbeat(t.Context(), h); err != nil {
			t.Fatal(err)
		}
	}
	r.eventually("the heartbeat after the forged stop read", func() bool { return r.workers("")["w-marker"] == "available" })
	if st := r.workers("")["w-good"]; st != "available" {
		t.Fatalf("after a forged stop: w-good is %s", st)
	}

	// Revoked: its heartbeats are refused within seconds; it goes unavailable.
	stop()
	r.heartbeats(hb("w-good", good))
	if n, err := admin.Revoke(t.Context(), "test", "w-good"); err != nil || n != 1 {
		t.Fatalf("revoke: %d, %v", n, err)
	}
	r.eventually("w-good unavailable after revocation", func() bool { return r.workers("")["w-good"] == "unavailable" })
}

func TestResultsFromUnregisteredWorkers(t *testing.T) {
	t.Parallel()
	r := start(t, nil)
	r.heartbeats(hb("w-real", ""))
	r.eventually("w-real registered", func() bool { return r.workers("")["w-real"] == "available" })

	// A job leased (behind the leader's back) to a worker that never
	// heartbeat, and a result for it with the right fencing token.
	var id, token int64
	if err := r.db.QueryRow(t.Context(), `INSERT INTO jobs (name, status, worker_id, lease_token, lease_expires_at, attempts, started_at)
		VALUES ('x', 'leased', 'ghost', nextval('lease_token_seq'), now() + interval '1 hour', 1, now())
		RETURNING id, lease_token`).Scan(&id, &token); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	err := r.q.SendResults(t.Context(), []wire.Result{{JobID: id, LeaseToken: token, WorkerID: "ghost", Attempt: 1,
		Outcome: wire.OutcomeCompleted, StartedAt: now, FinishedAt: now}})
	if err != nil {
		t.Fatal(err)
	}
	r.eventually("the result rejected", func() bool {
		return r.metric(`dts_results_rejected_total{reason="unregistered_worker"}`) == 1
	})
	var status string
	if err := r.db.QueryRow(t.Context(), `SELECT status FROM jobs WHERE id = $1`, id).Scan(&status); err != nil || status != "leased" {
		t.Fatalf("job is %q (%v), want still leased", status, err)
	}
	// Acknowledged: nothing pending in the consumer group.
	r.eventually("the result acknowledged", func() bool {
		p, err := r.rdb.XPending(t.Context(), r.keys.Results(), queue.ResultsGroup).Result()
		return err == nil && p.Count == 0
	})
}

func TestWorkersNeedsAdminToken(t *testing.T) {
	t.Parallel()
	secret := []byte("coordinator-test-secret-0123456789")
	r := start(t, func(c *coordinator.Config) { c.Auth.Tokens = auth.Config{JWTSecret: secret} })
	tok := func(scope string, exp time.Time) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "ops", "scope": scope, "exp": exp.Unix()}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	hour := time.Now().Add(time.Hour)
	for _, c := range []struct {
		name, token string
		status      int
	}{
		{"no token", "", 401},
		{"expired", tok("admin", time.Now().Add(-time.Hour)), 401},
		{"wrong scope", tok("read submit", hour), 403},
		{"admin", tok("admin", hour), 200},
	} {
		if status, b := r.get("/workers", c.token); status != c.status {
			t.Errorf("%s: /workers = %d %s, want %d", c.name, status, b, c.status)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if status, _ := r.get(p, ""); status != 200 {
			t.Errorf("%s without a token: %d", p, status)
		}
	}
	// Tokens configured: worker credentials are required by default.
	r.heartbeats(hb("w-anon", ""))
	r.eventually("the credential-less worker refused", func() bool {
		return r.metric(`dts_worker_auth_failures_total{reason="missing"}`) >= 1
	})
	if ws := r.workers(tok("admin", hour)); len(ws) != 0 {
		t.Errorf("workers = %v, want none", ws)
	}
}

// blockingListener has an address of our choosing and accepts nothing
// until closed.
type blockingListener struct {
	addr   net.Addr
	closed chan struct{}
	once   sync.Once
}

func (l *blockingListener) Accept() (net.Conn, error) { <-l.closed; return nil, net.ErrClosed }
func (l *blockingListener) Close() error              { l.once.Do(func() { close(l.closed) }); return nil }
func (l *blockingListener) Addr() net.Addr            { return l.addr }

func TestNonLoopbackRefusedWithoutAuth(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  func(*coordinator.Config)
		ok   bool
	}{
		{"no auth", func(*coordinator.Config) {}, false},
		{"insecure-no-auth", func(c *coordinator.Config) { c.Auth.InsecureNoAuth = true }, true},
		{"tokens", func(c *coordinator.Config) { c.Auth.Tokens.APIKeys = true }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := coordinator.Config{DatabaseURL: pgtest.NewDatabase(t), RedisURL: redistest.URL(), RedisPrefix: redistest.Prefix(t)}
			tt.cfg(&cfg)
			c, err := coordinator.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			ln := &blockingListener{addr: &net.TCPAddr{IP: net.IPv4zero, Port: 9000}, closed: make(chan struct{})}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx, ln) }()
			select {
			case err := <-done:
				if tt.ok || err == nil || !strings.Contains(err.Error(), "--insecure-no-auth") {
					t.Fatalf("Run returned at once: %v (want ok %v)", err, tt.ok)
				}
				cancel()
				return
			case <-time.After(300 * time.Millisecond):
			}
			cancel()
			if err := <-done; !tt.ok || err != nil {
				t.Fatalf("Run = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
