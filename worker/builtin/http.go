package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/dtsched/dts/worker"
)

const userAgent = "dts-worker-builtin"

// drainLimit is how much of an unwanted response body is read so that the
// connection can be reused; a longer body just costs a new connection.
const drainLimit = 64 << 10

// networkTask sends NetworkRequests concurrent GETs to NetworkURL. Any
// transport error or non-2xx answer fails the attempt (retryably).
// Result: {"requests": n, "statuses": [code, ...]}.
func (h *handlers) networkTask(ctx context.Context, job *worker.Job) (any, error) {
	if invalid(job) {
		return nil, ErrInvalidJob
	}
	if h.networkErr != nil {
		return nil, worker.Permanent(fmt.Errorf("network_task: bad NetworkURL: %w", h.networkErr))
	}
	n := h.cfg.NetworkRequests
	statuses := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { statuses[i], errs[i] = h.get(ctx, job) })
	}
	wg.Wait()
	failed, first := 0, error(nil)
	for _, err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	if failed > 0 {
		return nil, fmt.Errorf("network_task: %d of %d requests failed: %w", failed, n, first)
	}
	return map[string]any{"requests": n, "statuses": statuses}, nil
}

func (h *handlers) get(ctx context.Context, job *worker.Job) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.networkURL.String(), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("X-Job-ID", job.ID)
	resp, err := h.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, err // a *url.Error naming the method and the redacted URL
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("GET %s: status %d %s",
			h.networkURL.Redacted(), resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return resp.StatusCode, nil
}

// webhookPayload is the payload of a webhook job.
type webhookPayload struct {
	URL     string            `json:"url"`
	Method  string            `json:"method"`  // default GET without a body, POST with one
	Headers map[string]string `json:"headers"` // cannot replace the reserved headers
	Body    json.RawMessage   `json:"body"`    // a string is sent as is, any other JSON value as JSON
}

// reservedHeaders are set by webhook itself; payload headers of the same name
// are dropped.
var reservedHeaders = []string{"Idempotency-Key", "X-Job-ID", "X-Job-Attempt", "X-Worker-ID"}

// webhook sends one HTTP request described by the payload, with the job's id
// as Idempotency-Key so that a receiver can drop a retried delivery.
// A non-2xx answer fails the attempt; a 4xx other than 408 and 429 fails the
// job permanently, as does a payload webhook cannot use, a destination
// (or redirect) the address guard refuses, or a redirect chain longer than 5.
// The request, redirects and body together take at most WebhookTimeout.
// Result: {"status": code, "body": first WebhookMaxBody bytes, "truncated": bool}.
func (h *handlers) webhook(ctx context.Context, job *worker.Job) (any, error) {
	if invalid(job) {
		return nil, ErrInvalidJob
	}
	if h.guardErr != nil {
		return nil, worker.Permanent(fmt.Errorf("webhook: bad WebhookAllow: %w", h.guardErr))
	}
	req, err := newWebhookRequest(ctx, job)
	if err != nil {
		return nil, worker.Permanent(fmt.Errorf("webhook: %w", err))
	}
	resp, err := h.webhookC.Do(req)
	if err != nil {
		if isGuardError(err) {
			return nil, worker.Permanent(fmt.Errorf("webhook: %w", err))
		}
		return nil, fmt.Errorf("webhook: %w", err)
	}
	defer resp.Body.Close()

	maxBody := h.cfg.WebhookMaxBody
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("webhook: %s %s: status %d, reading body: %w",
			req.Method, req.URL.Redacted(), resp.StatusCode, err)
	}
	truncated := int64(len(body)) > maxBody
	if truncated {
		body = body[:maxBody]
	} else {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	}

	if code := resp.StatusCode; code < 200 || code > 299 {
		err := fmt.Errorf("webhook: %s %s: status %d %s: %q",
			req.Method, req.URL.Redacted(), code, http.StatusText(code), snippet(body))
		if code >= 400 && code <= 499 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests {
			return nil, worker.Permanent(err)
		}
		return nil, err
	}
	return map[string]any{"status": resp.StatusCode, "body": string(body), "truncated": truncated}, nil
}

// newWebhookRequest builds the request a webhook job describes. Every error
// it returns is the payload's fault.
func newWebhookRequest(ctx context.Context, job *worker.Job) (*http.Request, error) {
	var p webhookPayload
	dec := json.NewDecoder(strings.NewReader(job.PayloadString()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf(`payload must be {"url": ..., "method": ..., "headers": {...}, "body": ...}: %w`, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("payload has data after its JSON object")
	}
	if p.URL == "" {
		return nil, errors.New("payload has no url")
	}
	u, err := parseHTTPURL(p.URL)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}

	var body []byte
	contentType := ""
	switch b := bytes.TrimSpace(p.Body); {
	case len(b) == 0 || string(b) == "null":
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
		body, contentType = []byte(s), "text/plain; charset=utf-8"
	default:
		body, contentType = b, "application/json"
	}

	method := strings.ToUpper(p.Method)
	if method == "" {
		method = http.MethodGet
		if body != nil {
			method = http.MethodPost
		}
	}
	if !isToken(method) {
		return nil, fmt.Errorf("invalid method %q", p.Method)
	}

	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", userAgent)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range p.Headers {
		if !isToken(k) {
			return nil, fmt.Errorf("invalid header name %q", k)
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return nil, fmt.Errorf("invalid value for header %q", k)
		}
		req.Header.Set(k, v)
	}
	for _, k := range reservedHeaders {
		req.Header.Del(k)
	}
	req.Header.Set("Idempotency-Key", job.ID)
	req.Header.Set("X-Job-ID", job.ID)
	req.Header.Set("X-Job-Attempt", strconv.Itoa(job.Attempt))
	req.Header.Set("X-Worker-ID", job.WorkerID)
	return req, nil
}

// isToken reports whether s is a non-empty RFC 9110 token (a method or a
// header name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// snippet is the start of a response body quoted in an error.
func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
