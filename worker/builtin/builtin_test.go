package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dtsched/dts/worker"
)

// fakeRegistrar records what Register installs and, like a real worker,
// refuses a name registered twice.
type fakeRegistrar struct {
	mu       sync.Mutex
	names    []string
	handlers map[string]worker.HandlerFunc
}

func (r *fakeRegistrar) Handle(name string, h worker.HandlerFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handlers == nil {
		r.handlers = map[string]worker.HandlerFunc{}
	}
	if _, dup := r.handlers[name]; dup {
		panic("duplicate handler " + name)
	}
	if h == nil {
		panic("nil handler " + name)
	}
	r.names = append(r.names, name)
	r.handlers[name] = h
}

// handler returns the handler Register installed under name.
func (r *fakeRegistrar) handler(t *testing.T, name string) worker.HandlerFunc {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.handlers[name]
	if !ok {
		t.Fatalf("no handler registered for %q (have %v)", name, r.names)
	}
	return h
}

// register runs Register on a fresh fakeRegistrar.
func register(t *testing.T, cfg Config) *fakeRegistrar {
	t.Helper()
	r := &fakeRegistrar{}
	Register(r, cfg)
	return r
}

// testConfig is a Config whose slow parts take milliseconds, and whose
// webhook may reach the tests' receivers on 127.0.0.1 (guard_test.go checks
// that it may not without WebhookAllow).
func testConfig(t *testing.T) Config {
	t.Helper()
	return Config{
		CPUWork:      2 * time.Millisecond,
		FallbackMin:  time.Millisecond,
		FallbackMax:  3 * time.Millisecond,
		IODir:        t.TempDir(),
		Fallback:     true,
		WebhookAllow: []string{"127.0.0.1"},
		// Nothing listens on port 9: email must fail invalid_job before it
		// connects.
		SMTPHost: "127.0.0.1", SMTPPort: 9, SMTPTLS: SMTPTLSNone, SMTPFrom: "a@example.com",
	}
}

// newJob builds a job whose payload is the JSON text payload.
func newJob(name, payload string) *worker.Job {
	return &worker.Job{
		ID:         "42",
		Name:       name,
		Queue:      "default",
		Payload:    json.RawMessage(payload),
		Attempt:    2,
		MaxRetries: 3,
		WorkerID:   "worker-7",
		CreatedAt:  time.Now(),
	}
}

// jsonString is s as a JSON string literal.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// assertDirEmpty fails the test if dir holds any entry.
func assertDirEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left behind in %s: %s", dir, e.Name())
	}
}

// promptly runs h in a goroutine, cancels ctx once it started, and fails
// the test unless h returns a context error within 2 seconds.
func promptly(t *testing.T, h worker.HandlerFunc, job *worker.Job) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		_, err := h(ctx, job)
		done <- err
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error = %v, want context.Canceled", err)
		}
		if worker.IsPermanent(err) {
			t.Errorf("cancellation must not be permanent: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("handler did not return within 2s of cancellation")
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	named := []string{"cpu_intensive", "io_intensive", "mixed_workload", "network_task", "noop", "sleep", "webhook"}
	tests := []struct {
		name     string
		fallback bool
		want     []string
	}{
		{"without fallback", false, named},
		{"with fallback", true, append(slices.Clone(named), "default", "test_job")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := register(t, Config{Fallback: tt.fallback})
			got := slices.Sorted(slices.Values(r.names))
			want := slices.Sorted(slices.Values(tt.want))
			if !slices.Equal(got, want) {
				t.Errorf("registered %v, want %v", got, want)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	client := &http.Client{}
	tests := []struct {
		name  string
		in    Config
		check func(t *testing.T, c Config)
	}{
		{"zero", Config{}, func(t *testing.T, c Config) {
			if c.NetworkURL != "http://127.0.0.1:8000/healthz" || c.NetworkRequests != 3 ||
				c.FallbackMin != 100*time.Millisecond || c.FallbackMax != 50*time.Second ||
				c.CPUWork != time.Second || c.IODir != os.TempDir() || c.WebhookMaxBody != 4096 {
				t.Errorf("defaults = %+v", c)
			}
			if c.HTTPClient == nil || c.HTTPClient.Timeout != 30*time.Second {
				t.Errorf("HTTPClient = %+v, want one with a 30s timeout", c.HTTPClient)
			}
		}},
		{"negative", Config{NetworkRequests: -1, CPUWork: -time.Second, WebhookMaxBody: -5}, func(t *testing.T, c Config) {
			if c.NetworkRequests != 3 || c.CPUWork != time.Second || c.WebhookMaxBody != 4096 {
				t.Errorf("defaults = %+v", c)
			}
		}},
		{"kept", Config{NetworkURL: "http://x/", NetworkRequests: 7, FallbackMin: time.Second, FallbackMax: 2 * time.Second,
			CPUWork: time.Millisecond, IODir: "/d", HTTPClient: client, WebhookMaxBody: 10}, func(t *testing.T, c Config) {
			if c.NetworkURL != "http://x/" || c.NetworkRequests != 7 || c.FallbackMin != time.Second ||
				c.FallbackMax != 2*time.Second || c.CPUWork != time.Millisecond || c.IODir != "/d" ||
				c.HTTPClient != client || c.WebhookMaxBody != 10 {
				t.Errorf("set fields changed: %+v", c)
			}
		}},
		{"max below min", Config{FallbackMin: time.Minute, FallbackMax: time.Second}, func(t *testing.T, c Config) {
			if c.FallbackMax != time.Minute {
				t.Errorf("FallbackMax = %v, want it raised to FallbackMin", c.FallbackMax)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.check(t, tt.in.WithDefaults())
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	file := t.TempDir() + "/file"
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"zero", Config{}, false},
		{"https", Config{NetworkURL: "https://example.test/x"}, false},
		{"ftp", Config{NetworkURL: "ftp://example.test/x"}, true},
		{"no host", Config{NetworkURL: "http:///x"}, true},
		{"relative", Config{NetworkURL: "/healthz"}, true},
		{"missing dir", Config{IODir: t.TempDir() + "/nope"}, true},
		{"file as dir", Config{IODir: file}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := tt.cfg.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

func TestInvalidDetection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		payload string
		want    bool
	}{
		{`"invalid_job_content_1"`, true},
		{`"invalid_job_mixed_3"`, true},
		{`"valid_task_1"`, false},
		{`{"note":"has invalid_job inside"}`, true},
		{`"invalid\u005fjob"`, true},
		{`"\\invalid_job"`, true},
		{`"invalid job"`, false},
		{`"a\"b"`, false},
		{``, false},
		{`null`, false},
	}
	for _, tt := range tests {
		if got := invalid(newJob("x", tt.payload)); got != tt.want {
			t.Errorf("invalid(%s) = %v, want %v", tt.payload, got, tt.want)
		}
	}
}

// TestInvalidJob checks that every handler, the fallback included, fails a
// payload containing invalid_job with a retryable ErrInvalidJob before doing
// any work.
func TestInvalidJob(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	cfg := testConfig(t)
	cfg.CPUWork = time.Hour // would time the test out if the check came after the work
	cfg.NetworkURL = srv.URL
	reg := register(t, cfg)

	payloads := []string{
		jsonString("invalid_job_content_1"),
		jsonString("invalid_job_mixed_3"),
		`{"url":"` + srv.URL + `","body":"invalid_job","seconds":1}`,
	}
	for _, name := range reg.names {
		for _, p := range payloads {
			t.Run(name+"/"+p, func(t *testing.T) {
				t.Parallel()
				res, err := reg.handler(t, name)(t.Context(), newJob(name, p))
				if !errors.Is(err, ErrInvalidJob) || err.Error() != "invalid job content" {
					t.Errorf("err = %v, want %q", err, "invalid job content")
				}
				if worker.IsPermanent(err) {
					t.Error("invalid_job must be retried, not permanent")
				}
				if res != nil {
					t.Errorf("result = %v, want nil", res)
				}
			})
		}
	}
	t.Cleanup(func() {
		if n := hits.Load(); n != 0 {
			t.Errorf("server got %d requests, want none", n)
		}
		assertDirEmpty(t, cfg.IODir)
	})
}

// TestNoopAllocs is not parallel: AllocsPerRun counts every goroutine's
// allocations.
func TestNoopAllocs(t *testing.T) {
	h := register(t, Config{}).handler(t, "noop")
	job := newJob("noop", jsonString("bench_1"))
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if res, err := h(ctx, job); res != nil || err != nil {
			t.Fatalf("noop = %v, %v", res, err)
		}
	})
	if allocs != 0 {
		t.Errorf("noop allocates %v times per call, want 0", allocs)
	}
}

func BenchmarkNoop(b *testing.B) {
	h := noop
	job := newJob("noop", jsonString("bench_1"))
	ctx := context.Background()
	for b.Loop() {
		_, _ = h(ctx, job)
	}
}
