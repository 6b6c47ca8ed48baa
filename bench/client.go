package bench

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
	"time"

	"github.com/dtsched/dts/internal/wire"
)

// client talks to the submitter's HTTP API and scrapes /metrics pages.
type client struct {
	base string // submitter base URL
	http *http.Client
}

func newClient(base string, conns int) *client {
	tr := &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &client{base: base, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

func (c *client) close() { c.http.CloseIdleConnections() }

// post sends body and decodes a 201 answer into out.
func (c *client) post(ctx context.Context, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("POST %s: read answer: %w", path, err)
	}
	if resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(b, []byte(`"backlog_full"`)) {
		return errBacklogFull
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("POST %s: status %d: %.300s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("POST %s: decode answer: %w", path, err)
	}
	return nil
}

// put sends body with PUT and wants a 200 answer.
func (c *client) put(ctx context.Context, path string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("PUT %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("PUT %s: read answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT %s: status %d: %.300s", path, resp.StatusCode, b)
	}
	return nil
}

// errBacklogFull is the submitter's 503 backlog_full: its MAX_BACKLOG
// admission control refused the jobs (run with -service-env MAX_BACKLOG=N).
var errBacklogFull = errors.New("503 backlog_full")

// submitBatch posts a prepared JSON array of jobs to /submit_jobs and
// returns the new job ids.
func (c *client) submitBatch(ctx context.Context, body []byte) ([]int64, error) {
	var resp wire.BatchSubmitResponse
	if err := c.post(ctx, "/submit_jobs", body, &resp); err != nil {
		return nil, err
	}
	ids := make([]int64, len(resp.Jobs))
	for i, j := range resp.Jobs {
		id, err := strconv.ParseInt(j.JobID, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("POST /submit_jobs: job_id %q is not a number", j.JobID)
		}
		ids[i] = id
	}
	return ids, nil
}

// submitOne posts one job to /submit_job and returns its id.
func (c *client) submitOne(ctx context.Context, body []byte) (int64, error) {
	var resp wire.SubmitResponse
	if err := c.post(ctx, "/submit_job", body, &resp); err != nil {
		return 0, err
	}
	id, err := strconv.ParseInt(resp.JobID, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("POST /submit_job: job_id %q is not a number", resp.JobID)
	}
	return id, nil
}

// batchBody is a JSON array of n copies of job.
func batchBody(job string, n int) []byte {
	var b bytes.Buffer
	b.Grow(n * (len(job) + 1))
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(job)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// metrics is one scrape of a Prometheus text page.
type metrics map[string]float64

// scrape reads url's /metrics and sums each metric's samples over their
// labels (the bench wants totals); each labelled sample is also kept under
// its full series name, name{labels}.
func (c *client) scrape(ctx context.Context, url string) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return parseMetrics(string(b)), nil
}

func parseMetrics(text string) metrics {
	m := metrics{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		rest, series := line[len(name):], ""
		if j := strings.LastIndexByte(rest, '}'); j >= 0 {
			series, rest = name+rest[:j+1], rest[j+1:]
		}
		f := strings.Fields(rest) // value [timestamp]
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			m[name] += v
			if series != "" {
				m[series] = v
			}
		}
	}
	return m
}

// mean is the mean of histogram name between two scrapes, and its count.
// A name may end in a label set, as in name{step="claim"}: then only that
// series counts.
func mean(before, after metrics, name string) (float64, float64) {
	labels := ""
	if i := strings.IndexByte(name, '{'); i >= 0 {
		name, labels = name[:i], name[i:]
	}
	count, sum := name+"_count"+labels, name+"_sum"+labels
	n := after[count] - before[count]
	if n <= 0 {
		return 0, 0
	}
	return (after[sum] - before[sum]) / n, n
}
