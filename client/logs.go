package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/dtsched/dts/internal/wire"
)

type (
	// JobLogs answers GET /jobs/{id}/logs: a page of the lines a job's
	// handlers logged, oldest first (docs/api.md, "Job logs").
	JobLogs = wire.JobLogs
	// JobLogLine is one line of JobLogs.
	JobLogLine = wire.JobLogLine
	// JobLogDropped is how many lines of one attempt were dropped.
	JobLogDropped = wire.JobLogDropped
)

// JobLogsOptions narrows JobLogs.
type JobLogsOptions struct {
	Attempt int   // only this attempt's lines; 0: every attempt
	After   int64 // only lines after this seq: the previous page's NextAfter
	Limit   int   // at most this many lines; 0: the server's page (5000)
}

// JobLogs returns the lines the job with the decimal id logged, oldest
// first, after opts.After. To follow a running job, call it again with
// After set to the answer's NextAfter. An unknown id is ErrNotFound.
func (c *Client) JobLogs(ctx context.Context, id string, opts JobLogsOptions) (*JobLogs, error) {
	q := url.Values{}
	if opts.Attempt > 0 {
		q.Set("attempt", strconv.Itoa(opts.Attempt))
	}
	if opts.After > 0 {
		q.Set("after", strconv.FormatInt(opts.After, 10))
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var out JobLogs
	r := request{method: http.MethodGet, path: "/jobs/" + url.PathEscape(id) + "/logs", query: q, idempotent: true}
	if _, err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
