package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/dtsched/dts/internal/wire"
)

// LimitInfo is one limit as GET /limits shows it: Concurrency (0: no cap)
// and Rate per PeriodSeconds (0: no rate), with the key's jobs running and
// waiting now.
type LimitInfo = wire.LimitInfo

// ConcurrencyKey puts the job under the limit of key (SetLimit), set now,
// later or never. Without it, a job is under its name's limit
// ("name:<name>") if one exists when it is submitted.
func ConcurrencyKey(key string) Option {
	return Option{func(r *wire.SubmitRequest) { r.ConcurrencyKey = key }}
}

// NameLimitKey is the key of the limit on the jobs named name.
func NameLimitKey(name string) string { return wire.NameLimitPrefix + name }

// Limits lists every configured limit by key.
func (c *Client) Limits(ctx context.Context) ([]LimitInfo, error) {
	var out wire.LimitListResponse
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/limits", idempotent: true}, &out); err != nil {
		return nil, err
	}
	return out.Limits, nil
}

// SetLimit creates or replaces the limit of key (admin): at most
// concurrency of its jobs leased at once (0: no cap) and at most rate
// starts within any period (rate 0: none; period in whole seconds). At
// least one of concurrency and rate must be above 0.
func (c *Client) SetLimit(ctx context.Context, key string, concurrency, rate int, period time.Duration) (LimitInfo, error) {
	body, err := json.Marshal(wire.LimitUpdateRequest{Concurrency: concurrency, Rate: rate,
		PeriodSeconds: int(period / time.Second)})
	if err != nil {
		return LimitInfo{}, err
	}
	var out LimitInfo
	_, err = c.do(ctx, request{method: http.MethodPut, path: "/limits/" + url.PathEscape(key), body: body, idempotent: true}, &out)
	return out, err
}

// DeleteLimit removes the limit of key (admin); its jobs then run without
// one. An *Error with Code "not_found" when the key has no limit.
func (c *Client) DeleteLimit(ctx context.Context, key string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/limits/" + url.PathEscape(key), idempotent: true}, nil)
	return err
}
