package client

import (
	"context"
	"net/http"
	"net/url"
)

// The queue routes (GET /queues, POST /queues/{name}/pause|resume) are
// being added to the submitter; until they are, these calls answer
// ErrRouteNotFound. QueueInfo carries the fields dtsctl shows; other fields of
// the answer are ignored.

// QueueInfo is one queue as GET /queues shows it.
type QueueInfo struct {
	Name    string `json:"name"`
	Paused  bool   `json:"paused"`
	Pending int64  `json:"pending"`
	Running int64  `json:"running"`
}

// Queues lists the queues.
func (c *Client) Queues(ctx context.Context) ([]QueueInfo, error) {
	var out struct {
		Queues []QueueInfo `json:"queues"`
	}
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/queues", idempotent: true}, &out); err != nil {
		return nil, err
	}
	return out.Queues, nil
}

// PauseQueue stops the dispatch of a queue's jobs.
func (c *Client) PauseQueue(ctx context.Context, name string) error {
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/queues/" + url.PathEscape(name) + "/pause", idempotent: true}, nil)
	return err
}

// ResumeQueue restarts the dispatch of a paused queue's jobs.
func (c *Client) ResumeQueue(ctx context.Context, name string) error {
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/queues/" + url.PathEscape(name) + "/resume", idempotent: true}, nil)
	return err
}
