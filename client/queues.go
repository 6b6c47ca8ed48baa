package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/dtsched/dts/internal/wire"
)

// QueueInfo is one queue as GET /queues shows it.
type QueueInfo = wire.QueueInfo

// Queues lists every queue with jobs waiting, running or finished in the
// last minute, or with a setting (paused, a cap).
func (c *Client) Queues(ctx context.Context) ([]QueueInfo, error) {
	var out wire.QueueListResponse
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/queues", idempotent: true}, &out); err != nil {
		return nil, err
	}
	return out.Queues, nil
}

// PauseQueue stops the dispatch of a queue's jobs (needs the admin scope).
// Its running jobs finish; the leader sees the pause within its poll
// interval.
func (c *Client) PauseQueue(ctx context.Context, name string) error {
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/queues/" + url.PathEscape(name) + "/pause", idempotent: true}, nil)
	return err
}

// ResumeQueue restarts the dispatch of a paused queue's jobs (admin).
func (c *Client) ResumeQueue(ctx context.Context, name string) error {
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/queues/" + url.PathEscape(name) + "/resume", idempotent: true}, nil)
	return err
}

// SetQueueConcurrency caps how many of a queue's jobs are leased at once
// across the cluster; 0 removes the cap (admin).
func (c *Client) SetQueueConcurrency(ctx context.Context, name string, n int) (QueueInfo, error) {
	body, err := json.Marshal(map[string]int{"concurrency": n})
	if err != nil {
		return QueueInfo{}, err
	}
	var out QueueInfo
	_, err = c.do(ctx, request{method: http.MethodPut, path: "/queues/" + url.PathEscape(name), body: body, idempotent: true}, &out)
	return out, err
}
