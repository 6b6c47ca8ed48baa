package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtsched/dts/client"
)

// These tests sequence HTTP answers (503s, 429s, odd bodies) that a real
// submitter gives only under load or outage; client/integration runs the
// client against a real one.

// answer is one scripted HTTP answer.
type answer struct {
	status     int
	retryAfter string
	body       string
}

// script serves its answers in order (the last one repeats) and records
// each request it saw.
type script struct {
	mu       sync.Mutex
	answers  []answer
	requests []*http.Request
	bodies   []string
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests = append(s.requests, r)
	s.bodies = append(s.bodies, string(b))
	a := s.answers[min(len(s.requests), len(s.answers))-1]
	s.mu.Unlock()
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

func (s *script) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func apiError(code string) string {
	return fmt.Sprintf(`{"error":{"code":%q,"message":"scripted %s"}}`, code, code)
}

func newScripted(t *testing.T, cfg client.Config, answers ...answer) (*client.Client, *script) {
	t.Helper()
	s := &script{answers: answers}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	cfg.BaseURL = srv.URL
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

const okJob = `{"job_id":"7","name":"x","status":"pending","errors":[],"created_at":"2026-01-01T00:00:00Z"}`

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		code string
		st   int
	}{
		{"503 store_unavailable", "store_unavailable", 503},
		{"429 rate_limited", "rate_limited", 429},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, s := newScripted(t, client.Config{},
				answer{tc.st, "1", apiError(tc.code)},
				answer{200, "", okJob})
			start := time.Now()
			j, err := c.Get(t.Context(), "7")
			if err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el < time.Second {
				t.Errorf("retried after %v, want the 1s of Retry-After", el)
			}
			if j.JobID != "7" || s.count() != 2 {
				t.Errorf("job %q after %d requests, want 7 after 2", j.JobID, s.count())
			}
		})
	}
}

func TestRetriesAreBounded(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, client.Config{MaxAttempts: 3}, answer{503, "", apiError("overloaded")})
	_, err := c.Submit(t.Context(), "x", nil)
	if !errors.Is(err, client.ErrOverloaded) {
		t.Fatalf("err = %v, want ErrOverloaded", err)
	}
	if s.count() != 3 {
		t.Errorf("%d requests, want 3", s.count())
	}
}

// A submission without an idempotency key may have been stored when the
// answer is store_unavailable: it is not sent again. With a key it is.
func TestSubmitRetriedOnStoreUnavailableOnlyWithAKey(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, client.Config{}, answer{503, "0", apiError("store_unavailable")}, answer{201, "", `{"job_id":"1","status":"pending"}`})
	_, err := c.Submit(t.Context(), "x", nil)
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 503 || e.Code != "store_unavailable" || !errors.Is(err, client.ErrStoreUnavailable) {
		t.Fatalf("err = %#v, want a 503 store_unavailable *Error", err)
	}
	if s.count() != 1 {
		t.Errorf("without a key: %d requests, want 1", s.count())
	}

	c, s = newScripted(t, client.Config{}, answer{503, "0", apiError("store_unavailable")}, answer{201, "", `{"job_id":"1","status":"pending"}`})
	sub, err := c.Submit(t.Context(), "x", nil, client.IdempotencyKey("k1"))
	if err != nil || sub.JobID != "1" || s.count() != 2 {
		t.Fatalf("with a key: %+v, %v after %d requests; want job 1 after 2", sub, err, s.count())
	}
	if s.bodies[0] != s.bodies[1] {
		t.Errorf("the retry sent %q, the first %q", s.bodies[1], s.bodies[0])
	}

	// A batch is retried only when every job has a key.
	c, s = newScripted(t, client.Config{}, answer{503, "0", apiError("store_unavailable")}, answer{201, "", `{"jobs":[]}`})
	_, err = c.SubmitBatch(t.Context(), []client.Request{{Name: "a", Options: []client.Option{client.IdempotencyKey("a")}}, {Name: "b"}})
	if !errors.Is(err, client.ErrStoreUnavailable) || s.count() != 1 {
		t.Errorf("batch with a keyless job: %v after %d requests", err, s.count())
	}
}

func TestLongRetryAfterIsReturned(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, client.Config{MaxRetryWait: 5 * time.Second}, answer{503, "120", apiError("backlog_full")})
	_, err := c.Submit(t.Context(), "x", nil)
	var e *client.Error
	if !errors.As(err, &e) || !errors.Is(err, client.ErrBacklogFull) || e.RetryAfter != 120*time.Second {
		t.Fatalf("err = %#v, want backlog_full with RetryAfter 2m", err)
	}
	if s.count() != 1 {
		t.Errorf("%d requests, want 1", s.count())
	}
}

func TestContextEndsTheRetryWait(t *testing.T) {
	t.Parallel()
	// A deadline before the retry could be sent: the answer comes back at once.
	c, _ := newScripted(t, client.Config{}, answer{429, "5", apiError("rate_limited")})
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	if _, err := c.Stats(ctx); !errors.Is(err, client.ErrRateLimited) {
		t.Fatalf("err = %v, want ErrRateLimited", err)
	}
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Errorf("returned after %v; the 5s wait cannot fit the 1s deadline", el)
	}

	// Canceled while waiting: both causes are in the error.
	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := c.Stats(ctx)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, client.ErrRateLimited) {
		t.Fatalf("err = %v, want context.Canceled and ErrRateLimited", err)
	}
}

func TestErrorAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		answer answer
		is     error
		not    error
		code   string
	}{
		{answer{400, "", apiError("invalid_field")}, client.ErrInvalidField, client.ErrInvalidJSON, "invalid_field"},
		{answer{404, "", apiError("not_found")}, client.ErrNotFound, client.ErrRouteNotFound, "not_found"},
		{answer{409, "", apiError("conflict")}, client.ErrConflict, client.ErrNotFound, "conflict"},
		{answer{401, "", apiError("unauthorized")}, client.ErrUnauthorized, client.ErrForbidden, "unauthorized"},
		{answer{502, "", "<html>bad gateway</html>"}, nil, client.ErrInternal, ""},
	}
	for _, tc := range tests {
		c, _ := newScripted(t, client.Config{}, tc.answer)
		_, err := c.Get(t.Context(), "7")
		var e *client.Error
		if !errors.As(err, &e) || e.Status != tc.answer.status || e.Code != tc.code {
			t.Errorf("%d: err = %#v, want status %d code %q", tc.answer.status, err, tc.answer.status, tc.code)
			continue
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%v is not %v", err, tc.is)
		}
		if errors.Is(err, tc.not) {
			t.Errorf("%v is %v", err, tc.not)
		}
		if tc.code == "" && !strings.Contains(e.Message, "bad gateway") {
			t.Errorf("message %q lacks the body", e.Message)
		}
	}
}

func TestRequestShape(t *testing.T) {
	t.Parallel()
	tokens := 0
	c, s := newScripted(t, client.Config{Token: "unused", TokenFunc: func(context.Context) (string, error) {
		tokens++
		return fmt.Sprintf("jwt-%d", tokens), nil
	}}, answer{201, "", `{"job_id":"3","status":"pending"}`})
	runAt := time.Date(2030, 1, 2, 15, 4, 5, 0, time.FixedZone("x", 3600))
	_, err := c.Submit(t.Context(), "send_email", map[string]string{"to": "a@example.com"},
		client.Queue("mail"), client.Priority(7), client.MaxRetries(0), client.RunAt(runAt),
		client.Timeout(1500*time.Millisecond), client.IdempotencyKey("order-42"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(t.Context(), client.ListParams{Status: client.StatusFailed, Queue: "mail", Limit: 20, Cursor: "9"}); err != nil {
		t.Fatal(err)
	}
	r := s.requests[0]
	if r.Method != "POST" || r.URL.Path != "/submit_job" || r.Header.Get("Authorization") != "Bearer jwt-1" {
		t.Errorf("request %s %s with Authorization %q", r.Method, r.URL, r.Header.Get("Authorization"))
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(s.bodies[0]), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"name": "send_email", "payload": map[string]any{"to": "a@example.com"}, "queue": "mail",
		"priority": 7.0, "max_retries": 0.0, "run_at": "2030-01-02T14:04:05Z", "timeout_seconds": 2.0, "idempotency_key": "order-42"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("body %v\nwant %v", got, want)
	}
	if r := s.requests[1]; r.URL.String() != "/jobs?cursor=9&limit=20&queue=mail&status=failed" || r.Header.Get("Authorization") != "Bearer jwt-2" {
		t.Errorf("list request %s with Authorization %q", r.URL, r.Header.Get("Authorization"))
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"127.0.0.1:8000", "ftp://x", "http://", "http://h/?q=1"} {
		if _, err := client.New(client.Config{BaseURL: u}); err == nil {
			t.Errorf("BaseURL %q accepted", u)
		}
	}
	if _, err := client.New(client.Config{}); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
