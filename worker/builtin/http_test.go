package builtin

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dtsched/dts/worker"
)

// TestNetworkTask checks that the GETs really happen, and at the same time:
// the server answers none until all have arrived.
func TestNetworkTask(t *testing.T) {
	t.Parallel()
	const n = 4
	var (
		arrived  sync.WaitGroup
		jobIDs   sync.Map
		requests atomic.Int64
	)
	arrived.Add(n)
	allIn := make(chan struct{})
	go func() { arrived.Wait(); close(allIn) }()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/healthz" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		requests.Add(1)
		jobIDs.Store(r.Header.Get("X-Job-ID"), true)
		arrived.Done()
		select {
		case <-allIn:
		case <-time.After(5 * time.Second):
			http.Error(w, "requests were not concurrent", http.StatusGatewayTimeout)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig(t)
	cfg.NetworkURL = srv.URL + "/healthz"
	cfg.NetworkRequests = n
	res, err := register(t, cfg).handler(t, "network_task")(t.Context(), newJob("network_task", jsonString("api_calls_task_1")))
	if err != nil {
		t.Fatal(err)
	}
	m := res.(map[string]any)
	if m["requests"] != n || !slices.Equal(m["statuses"].([]int), []int{204, 204, 204, 204}) {
		t.Errorf("result = %v", m)
	}
	if got := requests.Load(); got != n {
		t.Errorf("server saw %d requests, want %d", got, n)
	}
	if _, ok := jobIDs.Load("42"); !ok {
		t.Error("requests lacked X-Job-ID: 42")
	}
}

func TestNetworkTaskFailure(t *testing.T) {
	t.Parallel()
	statusServer := func(code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) }))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	closed := "http://127.0.0.1:" + strconv.Itoa(refusingPort(t))
	tests := []struct {
		name, url string
		permanent bool
		inErr     string
	}{
		{"500", statusServer(500), false, "status 500"},
		{"404", statusServer(404), false, "status 404"},
		{"302 without location", statusServer(302), false, "status 302"},
		{"connection refused", closed, false, "3 of 3 requests failed"},
		{"bad scheme", "ftp://127.0.0.1/x", true, "NetworkURL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t)
			cfg.NetworkURL = tt.url
			res, err := register(t, cfg).handler(t, "network_task")(t.Context(), newJob("network_task", jsonString("api_calls_task_1")))
			if err == nil || res != nil {
				t.Fatalf("= %v, %v; want an error", res, err)
			}
			if !strings.Contains(err.Error(), tt.inErr) {
				t.Errorf("err = %q, want it to contain %q", err, tt.inErr)
			}
			if worker.IsPermanent(err) != tt.permanent {
				t.Errorf("permanent = %v, want %v (%v)", worker.IsPermanent(err), tt.permanent, err)
			}
		})
	}
}

func TestNetworkTaskCancel(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(srv.Close)
	cfg := testConfig(t)
	cfg.NetworkURL = srv.URL
	promptly(t, register(t, cfg).handler(t, "network_task"), newJob("network_task", jsonString("api_calls_task_1")))
}

// seen is what a webhook receiver got.
type seen struct {
	method, path string
	header       http.Header
	body         string
}

// receiver starts a server that records each request and answers with code
// and body.
func receiver(t *testing.T, code int, body string) (url string, got func() []seen) {
	t.Helper()
	var (
		mu   sync.Mutex
		reqs []seen
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, seen{r.Method, r.URL.Path, r.Header.Clone(), string(b)})
		mu.Unlock()
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(reqs)
	}
}

func TestWebhookRequest(t *testing.T) {
	t.Parallel()
	h := register(t, testConfig(t)).handler(t, "webhook")
	tests := []struct {
		name        string
		payload     func(url string) string
		method      string
		body        string
		contentType string
		extra       map[string]string // further headers the receiver must see
	}{
		{"get by default", func(u string) string { return `{"url":"` + u + `/hook"}` }, "GET", "", "", nil},
		{"post with json body", func(u string) string { return `{"url":"` + u + `/hook","body":{"a":1,"b":[true]}}` },
			"POST", `{"a":1,"b":[true]}`, "application/json", nil},
		{"post with string body", func(u string) string { return `{"url":"` + u + `/hook","body":"hello\nworld"}` },
			"POST", "hello\nworld", "text/plain; charset=utf-8", nil},
		{"explicit method and headers", func(u string) string {
			return `{"url":"` + u + `/hook","method":"put","body":"x","headers":{"Authorization":"Bearer t","Content-Type":"text/csv","x-custom":"v"}}`
		}, "PUT", "x", "text/csv", map[string]string{"Authorization": "Bearer t", "X-Custom": "v"}},
		{"reserved headers cannot be overridden", func(u string) string {
			return `{"url":"` + u + `/hook","headers":{"X-Job-ID":"evil","idempotency-key":"evil","X-Job-Attempt":"9","X-WORKER-ID":"evil"}}`
		}, "GET", "", "", nil},
		{"payload sent as a JSON string", func(u string) string { return jsonString(`{"url":"` + u + `/hook","method":"DELETE"}`) },
			"DELETE", "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url, got := receiver(t, http.StatusOK, "ok")
			res, err := h(t.Context(), newJob("webhook", tt.payload(url)))
			if err != nil {
				t.Fatal(err)
			}
			if m := res.(map[string]any); m["status"] != 200 || m["body"] != "ok" || m["truncated"] != false {
				t.Errorf("result = %v", m)
			}
			reqs := got()
			if len(reqs) != 1 {
				t.Fatalf("receiver got %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.method != tt.method || r.path != "/hook" || r.body != tt.body {
				t.Errorf("got %s %s %q, want %s /hook %q", r.method, r.path, r.body, tt.method, tt.body)
			}
			want := map[string]string{
				"Idempotency-Key": "42", "X-Job-Id": "42", "X-Job-Attempt": "2", "X-Worker-Id": "worker-7",
				"Content-Type": tt.contentType,
			}
			for k, v := range tt.extra {
				want[k] = v
			}
			for k, v := range want {
				if vs := r.header.Values(k); v == "" && len(vs) != 0 || v != "" && !slices.Equal(vs, []string{v}) {
					t.Errorf("header %s = %q, want %q", k, vs, v)
				}
			}
		})
	}
}

func TestWebhookStatus(t *testing.T) {
	t.Parallel()
	h := register(t, testConfig(t)).handler(t, "webhook")
	tests := []struct {
		code      int
		ok        bool
		permanent bool
	}{
		{200, true, false},
		{201, true, false},
		{204, true, false},
		{400, false, true},
		{401, false, true},
		{404, false, true},
		{410, false, true},
		{422, false, true},
		{408, false, false},
		{429, false, false},
		{500, false, false},
		{502, false, false},
		{503, false, false},
		{304, false, false},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.code), func(t *testing.T) {
			t.Parallel()
			url, got := receiver(t, tt.code, "why")
			res, err := h(t.Context(), newJob("webhook", `{"url":"`+url+`","body":"b"}`))
			if len(got()) != 1 {
				t.Errorf("receiver got %d requests, want 1", len(got()))
			}
			if tt.ok {
				if err != nil || res.(map[string]any)["status"] != tt.code {
					t.Errorf("= %v, %v; want status %d", res, err, tt.code)
				}
				return
			}
			if err == nil || res != nil {
				t.Fatalf("= %v, %v; want an error", res, err)
			}
			if !strings.Contains(err.Error(), "status "+strconv.Itoa(tt.code)) {
				t.Errorf("err = %q, want it to name status %d", err, tt.code)
			}
			if tt.code != 304 && !strings.Contains(err.Error(), `"why"`) {
				t.Errorf("err = %q, want it to quote the body", err)
			}
			if worker.IsPermanent(err) != tt.permanent {
				t.Errorf("permanent = %v, want %v", worker.IsPermanent(err), tt.permanent)
			}
		})
	}
}

func TestWebhookBadPayload(t *testing.T) {
	t.Parallel()
	url, got := receiver(t, http.StatusOK, "ok")
	h := register(t, testConfig(t)).handler(t, "webhook")
	tests := []struct{ name, payload string }{
		{"not json", jsonString("webhook_task_1")},
		{"null", `null`},
		{"array", `["` + url + `"]`},
		{"missing url", `{"method":"POST"}`},
		{"empty url", `{"url":""}`},
		{"relative url", `{"url":"/hook"}`},
		{"ftp scheme", `{"url":"ftp://127.0.0.1/x"}`},
		{"file scheme", `{"url":"file:///etc/passwd"}`},
		{"no host", `{"url":"http:///x"}`},
		{"unparsable url", `{"url":"http://[::1"}`},
		{"url not a string", `{"url":5}`},
		{"unknown field", `{"url":"` + url + `","header":{"a":"b"}}`},
		{"bad method", `{"url":"` + url + `","method":"GE T"}`},
		{"bad header name", `{"url":"` + url + `","headers":{"a b":"c"}}`},
		{"header value with newline", `{"url":"` + url + `","headers":{"A":"b\r\nX-Evil: 1"}}`},
		{"header value not a string", `{"url":"` + url + `","headers":{"A":1}}`},
		{"trailing data", jsonString(`{"url":"` + url + `"} {}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := h(t.Context(), newJob("webhook", tt.payload))
			if res != nil || !worker.IsPermanent(err) {
				t.Errorf("= %v, %v; want a permanent error", res, err)
			}
		})
	}
	t.Cleanup(func() {
		if n := len(got()); n != 0 {
			t.Errorf("receiver got %d requests, want none", n)
		}
	})
}

func TestWebhookTruncation(t *testing.T) {
	t.Parallel()
	const max = 16
	cfg := testConfig(t)
	cfg.WebhookMaxBody = max
	h := register(t, cfg).handler(t, "webhook")
	tests := []struct {
		name, body, want string
		truncated        bool
	}{
		{"short", "abc", "abc", false},
		{"exactly max", strings.Repeat("x", max), strings.Repeat("x", max), false},
		{"one more than max", strings.Repeat("y", max+1), strings.Repeat("y", max), true},
		{"much longer", strings.Repeat("0123456789", 100), "0123456789012345", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url, _ := receiver(t, http.StatusOK, tt.body)
			res, err := h(t.Context(), newJob("webhook", `{"url":"`+url+`"}`))
			if err != nil {
				t.Fatal(err)
			}
			m := res.(map[string]any)
			if m["body"] != tt.want || m["truncated"] != tt.truncated {
				t.Errorf("body %q truncated %v, want %q %v", m["body"], m["truncated"], tt.want, tt.truncated)
			}
		})
	}
}

// TestWebhookReadsLittle checks that a huge response is not read to its end.
func TestWebhookReadsLittle(t *testing.T) {
	t.Parallel()
	const total = 256 << 20
	written := make(chan int64, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		var n int64
		defer func() { written <- n }()
		for n < total {
			m, err := w.Write(chunk)
			n += int64(m)
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	h := register(t, testConfig(t)).handler(t, "webhook")
	res, err := h(t.Context(), newJob("webhook", `{"url":"`+srv.URL+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	if m := res.(map[string]any); len(m["body"].(string)) != DefaultWebhookMaxBody || m["truncated"] != true {
		t.Errorf("body of %d bytes, truncated %v", len(m["body"].(string)), m["truncated"])
	}
	select {
	case n := <-written:
		if n >= total {
			t.Errorf("server wrote all %d bytes: the response was read to its end", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server still writing 10s after the handler returned")
	}
}

func TestWebhookCancel(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(srv.Close)
	h := register(t, testConfig(t)).handler(t, "webhook")
	promptly(t, h, newJob("webhook", `{"url":"`+srv.URL+`"}`))
}

func TestWebhookTransportError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	_, err := register(t, testConfig(t)).handler(t, "webhook")(t.Context(), newJob("webhook", `{"url":"`+srv.URL+`"}`))
	if err == nil || worker.IsPermanent(err) || errors.Is(err, ErrInvalidJob) {
		t.Errorf("err = %v, want a retryable transport error", err)
	}
}
