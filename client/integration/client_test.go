package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/dtsched/dts/client"
	"github.com/dtsched/dts/devcluster"
	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter"
	"github.com/dtsched/dts/worker"
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

// stack is the harness's in-process cluster (devcluster.Stack) under the
// names the tests here use.
type stack struct {
	h      *devcluster.Stack
	t      *testing.T
	url    string
	dbURL  string
	prefix string
}

func newStack(t *testing.T, configure ...func(*submitter.Config)) *stack {
	t.Helper()
	h := devcluster.New(t, configure...)
	return &stack{h: h, t: t, url: h.URL, dbURL: h.DatabaseURL, prefix: h.RedisPrefix}
}

func (s *stack) client(cfg client.Config) *client.Client {
	s.t.Helper()
	cfg.BaseURL = s.url
	c, err := client.New(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// run starts a coordinator and a worker with handlers, in process, until
// the test ends.
func (s *stack) run(handlers map[string]worker.HandlerFunc) {
	s.t.Helper()
	s.h.Run(devcluster.Services{Handlers: handlers})
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestSubmitWaitListRequeue(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.run(map[string]worker.HandlerFunc{
		"echo": func(ctx context.Context, j *worker.Job) (any, error) {
			return map[string]any{"echo": j.PayloadString(), "attempt": j.Attempt}, nil
		},
		"doomed": func(ctx context.Context, j *worker.Job) (any, error) {
			return nil, worker.Permanent(errors.New("doomed from the start"))
		},
	})
	c := s.client(client.Config{PollInterval: 100 * time.Millisecond})
	ctx := within(t, 30*time.Second)

	sub, err := c.Submit(ctx, "echo", "hello", client.IdempotencyKey("greeting"))
	if err != nil || sub.Status != client.StatusPending {
		t.Fatalf("Submit: %+v, %v", sub, err)
	}
	j, err := c.Wait(ctx, sub.JobID)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	var res struct {
		Echo    string
		Attempt int
	}
	if j.Status != client.StatusCompleted || json.Unmarshal(j.Result, &res) != nil || res.Echo != "hello" || res.Attempt != 1 {
		t.Fatalf("job %s: status %s result %s", j.JobID, j.Status, j.Result)
	}
	again, err := c.Submit(ctx, "echo", "other", client.IdempotencyKey("greeting"))
	if err != nil || again.JobID != sub.JobID || again.Status != client.StatusCompleted {
		t.Errorf("repeated key: %+v, %v; want job %s completed", again, err, sub.JobID)
	}

	batch, err := c.SubmitBatch(ctx, []client.Request{
		{Name: "echo", Payload: json.RawMessage(`{"n":1}`)},
		{Name: "echo", Payload: 2, Options: []client.Option{client.Priority(5)}},
	})
	if err != nil || len(batch) != 2 {
		t.Fatalf("SubmitBatch: %+v, %v", batch, err)
	}
	for _, b := range batch {
		if j, err := c.Wait(ctx, b.JobID); err != nil || j.Status != client.StatusCompleted {
			t.Fatalf("Wait %s: %+v, %v", b.JobID, j, err)
		}
	}

	page, err := c.List(ctx, client.ListParams{Name: "echo", Status: client.StatusCompleted, Limit: 2})
	if err != nil || len(page.Jobs) != 2 || page.NextCursor == nil || page.Jobs[0].JobID != batch[1].JobID {
		t.Fatalf("List: %+v, %v", page, err)
	}
	var ids []string
	for j, err := range c.ListAll(ctx, client.ListParams{Name: "echo", Limit: 1}) {
		if err != nil {
			t.Fatalf("ListAll: %v", err)
		}
		ids = append(ids, j.JobID)
	}
	if want := []string{batch[1].JobID, batch[0].JobID, sub.JobID}; fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("ListAll: %v, want %v", ids, want)
	}

	dead, err := c.Submit(ctx, "doomed", nil)
	if err != nil {
		t.Fatal(err)
	}
	j, err = c.Wait(ctx, dead.JobID)
	if err != nil || j.Status != client.StatusFailed || j.LastError == nil || !strings.Contains(*j.LastError, "doomed") {
		t.Fatalf("Wait doomed: %+v, %v", j, err)
	}
	dlq, err := c.DLQ(ctx, client.DLQParams{Limit: 10})
	if err != nil || len(dlq.Jobs) != 1 || dlq.Jobs[0].JobID != dead.JobID || dlq.Jobs[0].Reason != "permanent" {
		t.Fatalf("DLQ: %+v, %v", dlq, err)
	}
	rq, err := c.Requeue(ctx, dead.JobID)
	if err != nil || rq.Status != client.StatusPending {
		t.Fatalf("Requeue: %+v, %v", rq, err)
	}
	if j, err := c.Wait(ctx, dead.JobID); err != nil || j.Status != client.StatusFailed || len(j.Errors) != 2 {
		t.Errorf("after requeue: %+v, %v; want failed again with 2 errors", j, err)
	}
	st, err := c.Stats(ctx)
	if err != nil || st.Jobs[client.StatusCompleted] != 3 || st.DLQDepth != 1 {
		t.Errorf("Stats: %+v, %v", st, err)
	}
}

func TestTypedErrors(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	c := s.client(client.Config{})
	ctx := within(t, 30*time.Second)

	check := func(what string, err error, sentinel error, status int) {
		t.Helper()
		var e *client.Error
		if !errors.As(err, &e) || !errors.Is(err, sentinel) || e.Status != status || e.Message == "" {
			t.Errorf("%s: err = %#v, want %v with status %d and a message", what, err, sentinel, status)
		}
	}
	_, err := c.Submit(ctx, "x", nil, client.Priority(5000))
	check("priority 5000", err, client.ErrInvalidField, 400)
	_, err = c.Submit(ctx, "x", nil, client.Delay(time.Hour), client.RunAt(time.Now()))
	check("delay and run_at", err, client.ErrInvalidField, 400)
	_, err = c.Get(ctx, "abc")
	check("get abc", err, client.ErrInvalidID, 400)
	_, err = c.Get(ctx, "999999")
	check("get unknown", err, client.ErrNotFound, 404)
	_, err = c.Requeue(ctx, "999999")
	check("requeue unknown", err, client.ErrNotFound, 404)
	_, err = c.List(ctx, client.ListParams{Status: "asleep"})
	check("list status asleep", err, client.ErrInvalidField, 400)

	sub, err := c.Submit(ctx, "later", nil, client.Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Cancel(ctx, sub.JobID); err != nil || r.Status != client.StatusCanceled {
		t.Fatalf("Cancel: %+v, %v", r, err)
	}
	_, err = c.Cancel(ctx, sub.JobID)
	check("cancel a canceled job", err, client.ErrConflict, 409)
	_, err = c.Requeue(ctx, sub.JobID)
	check("requeue a canceled job", err, client.ErrConflict, 409)
}

// A real 503 backlog_full carries Retry-After: 1; the client waits it out
// and succeeds once the backlog has room.
func TestBacklogFullIsRetriedAfterRetryAfter(t *testing.T) {
	t.Parallel()
	s := newStack(t, func(c *submitter.Config) {
		c.MaxBacklog = 1
		c.BacklogCheckInterval = 20 * time.Millisecond
	})
	ctx := within(t, 30*time.Second)
	first, err := s.client(client.Config{}).Submit(ctx, "nobody_runs_this", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until a count sees it: refused at every try for more than a
	// count interval (a first refusal may come from the tally of accepted
	// jobs, which a count already under way can still replace).
	once := s.client(client.Config{MaxAttempts: 1})
	var refusedSince time.Time // of the current run of refusals
	testwait.NoError(t, 5*time.Second, "a count to find the backlog full", func() error {
		_, err := once.Submit(ctx, "probe", nil, client.Delay(time.Hour))
		if err == nil {
			refusedSince = time.Time{} // admitted: the refusals must be consecutive
			return errors.New("admitted")
		}
		if !errors.Is(err, client.ErrBacklogFull) {
			t.Fatalf("backlog never full: %v", err)
		}
		if refusedSince.IsZero() {
			refusedSince = time.Now()
		}
		if time.Since(refusedSince) < 50*time.Millisecond {
			return err
		}
		var e *client.Error
		if errors.As(err, &e); e.RetryAfter != time.Second {
			t.Errorf("RetryAfter = %v, want 1s", e.RetryAfter)
		}
		return nil
	})

	c := s.client(client.Config{})
	time.AfterFunc(300*time.Millisecond, func() { _, _ = c.Cancel(context.Background(), first.JobID) })
	start := time.Now()
	sub, err := c.Submit(ctx, "second", nil)
	if err != nil {
		t.Fatalf("Submit after the backlog emptied: %v", err)
	}
	if el := time.Since(start); el < time.Second {
		t.Errorf("accepted after %v: the client did not wait the 1s Retry-After", el)
	}
	if sub.JobID == "" {
		t.Error("no job id")
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	secret := []byte("client-test-secret-client-test-secret")
	s := newStack(t, func(c *submitter.Config) {
		c.Auth = auth.Config{JWTSecret: secret, JWTIssuer: "dts-test", APIKeys: true}
	})
	ctx := within(t, 30*time.Second)

	_, err := s.client(client.Config{}).Stats(ctx)
	if !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("no token: %v, want ErrUnauthorized", err)
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "ci", "iss": "dts-test",
		"exp": time.Now().Add(time.Hour).Unix(), "scope": "submit read"}).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	jc := s.client(client.Config{Token: tok})
	sub, err := jc.Submit(ctx, "x", nil, client.Delay(time.Hour))
	if err != nil {
		t.Fatalf("JWT submit: %v", err)
	}
	if _, err := jc.Cancel(ctx, sub.JobID); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("JWT without admin cancels: %v, want ErrForbidden", err)
	}

	key, hash := auth.NewAPIKey()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `INSERT INTO api_keys (name, hash, scopes) VALUES ('ops', $1, '{admin}')`, hash); err != nil {
		t.Fatal(err)
	}
	if r, err := s.client(client.Config{Token: key}).Cancel(ctx, sub.JobID); err != nil || r.Status != client.StatusCanceled {
		t.Errorf("API key cancel: %+v, %v", r, err)
	}
}

// The client spells the authentication codes itself (it does not import
// internal/httpx); they must stay the server's.
func TestAuthCodesMatchTheServer(t *testing.T) {
	t.Parallel()
	for sentinel, code := range map[*client.Error]string{
		client.ErrUnauthorized: wire.CodeUnauthorized,
		client.ErrForbidden:    wire.CodeForbidden,
		client.ErrRateLimited:  wire.CodeRateLimited,
		client.ErrOverloaded:   wire.CodeOverloaded,
	} {
		if sentinel.Code != code {
			t.Errorf("client code %q, server %q", sentinel.Code, code)
		}
	}
}
