package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults of Config's fields.
const (
	DefaultBaseURL      = "http://127.0.0.1:8000"
	DefaultMaxAttempts  = 5
	DefaultMaxRetryWait = 30 * time.Second
	DefaultPollInterval = time.Second
)

// Config configures a Client. Zero fields take the defaults in their comments.
type Config struct {
	// BaseURL is the submitter's URL, with an optional path prefix.
	// Default DefaultBaseURL (http://127.0.0.1:8000).
	BaseURL string
	// Token is sent as "Authorization: Bearer <Token>": an API key (dts_…)
	// or a JWT. Default none, for a submitter with auth off.
	Token string
	// TokenFunc, when set, is called before every request and its token is
	// used instead of Token: for JWTs that expire and are renewed. Default nil.
	TokenFunc func(ctx context.Context) (string, error)
	// HTTPClient sends the requests; per-call deadlines come from the
	// context. Default http.DefaultClient.
	HTTPClient *http.Client
	// MaxAttempts is how many times a request is sent while the answer says
	// to try again (see Client); 1 turns retries off. Default 5.
	MaxAttempts int
	// MaxRetryWait is the longest wait before a retry: an answer whose
	// Retry-After is longer is returned instead of waited for. Default 30s.
	MaxRetryWait time.Duration
	// PollInterval is the longest pause between two polls of Wait (it
	// starts at 50ms and doubles up to this). Default 1s.
	PollInterval time.Duration
	// UserAgent is sent as User-Agent. Default "dts-go-client".
	UserAgent string
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxRetryWait <= 0 {
		c.MaxRetryWait = DefaultMaxRetryWait
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.UserAgent == "" {
		c.UserAgent = "dts-go-client"
	}
	return c
}

func (c Config) validate() (*url.URL, error) {
	u, err := url.Parse(c.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("config: BaseURL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("config: BaseURL %q must be an http or https URL with a host", c.BaseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("config: BaseURL %q must not have a query or fragment", c.BaseURL)
	}
	if strings.ContainsAny(c.Token, "\r\n") {
		return nil, errors.New("config: Token contains a line break")
	}
	return u, nil
}

// Client talks to one submitter. It is safe for concurrent use.
//
// Retries: an answer is retried, after its Retry-After (or a short
// jittered backoff when it has none) and up to Config.MaxAttempts sends,
// when the server guarantees the request did nothing (429 rate_limited,
// 503 overloaded, 503 backlog_full) or the request may safely be repeated:
// reads, and submissions whose every job has an idempotency key, are also
// retried on the other 503s (store_unavailable, unavailable). A submission
// without a key is not retried on those, since the job may have been created
// (docs/api.md#errors); nor are Cancel and Requeue.
type Client struct {
	cfg  Config
	base string // BaseURL without a trailing slash
}

// New returns a Client for cfg. It does no I/O.
func New(cfg Config) (*Client, error) {
	cfg = cfg.WithDefaults()
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, base: strings.TrimRight(u.String(), "/")}, nil
}

// request is one API call: what to send and whether repeating it is safe.
type request struct {
	method     string
	path       string // escaped
	query      url.Values
	body       []byte // JSON, or nil
	idempotent bool   // safe to resend after an answer that may have acted
}

// do sends r, retrying as the Client doc says, and decodes a 2xx answer
// into out (when out is not nil). It returns the answer's status.
func (c *Client) do(ctx context.Context, r request, out any) (int, error) {
	target := c.base + r.path
	if len(r.query) > 0 {
		target += "?" + r.query.Encode()
	}
	for attempt := 1; ; attempt++ {
		status, body, apiErr, err := c.send(ctx, r, target)
		if err != nil {
			return 0, err
		}
		if apiErr == nil {
			if out != nil && len(body) > 0 {
				if err := json.Unmarshal(body, out); err != nil {
					return status, fmt.Errorf("%s %s: decode answer: %w", r.method, r.path, err)
				}
			}
			return status, nil
		}
		wait, ok := c.retryWait(apiErr, r.idempotent, attempt)
		if !ok {
			return status, apiErr
		}
		if d, has := ctx.Deadline(); has && time.Until(d) < wait {
			return status, apiErr // the retry could not happen in time
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return status, fmt.Errorf("dts: %w while waiting to retry: %w", ctx.Err(), apiErr)
		case <-t.C:
		}
	}
}

// send makes one HTTP exchange. It returns a 2xx answer's body, or an
// error answer as an *Error, or the error that prevented an answer.
func (c *Client) send(ctx context.Context, r request, target string) (int, []byte, *Error, error) {
	var rd io.Reader
	if r.body != nil {
		rd = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, rd)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	token := c.cfg.Token
	if c.cfg.TokenFunc != nil {
		if token, err = c.cfg.TokenFunc(ctx); err != nil {
			return 0, nil, nil, fmt.Errorf("%s %s: token: %w", r.method, r.path, err)
		}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return resp.StatusCode, nil, newError(resp, b, time.Now()), nil
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: read answer: %w", r.method, r.path, err)
	}
	return resp.StatusCode, b, nil, nil
}

// retryWait says whether an error answer to the attempt-th send is retried,
// and after how long.
func (c *Client) retryWait(e *Error, idempotent bool, attempt int) (time.Duration, bool) {
	if attempt >= c.cfg.MaxAttempts {
		return 0, false
	}
	switch {
	case e.Status == http.StatusTooManyRequests:
	case e.Status == http.StatusServiceUnavailable && (e.Code == codeOverloaded || e.Code == ErrBacklogFull.Code):
	case e.Status == http.StatusServiceUnavailable && idempotent:
	default:
		return 0, false
	}
	wait := e.RetryAfter
	if wait == 0 {
		// 100ms, 200ms, 400ms, ... up to 5s, with up to 50% jitter.
		wait = min(100*time.Millisecond<<min(attempt-1, 6), 5*time.Second)
		wait += rand.N(wait / 2)
	}
	if wait > c.cfg.MaxRetryWait {
		return 0, false
	}
	return wait, true
}
