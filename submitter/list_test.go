package submitter_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/wire"
)

// page is one answer of GET /jobs or GET /dlq: the job ids, the cursor and
// the body's size.
type page struct {
	ids   []string
	next  *string
	bytes int
}

func (e *env) listPage(path string) page {
	e.t.Helper()
	status, body := e.do("GET", path, "")
	var resp struct {
		Jobs       []wire.Job `json:"jobs"`
		NextCursor *string    `json:"next_cursor"`
	}
	e.must(http.StatusOK, &resp, status, body)
	p := page{next: resp.NextCursor, bytes: len(body)}
	for _, j := range resp.Jobs {
		p.ids = append(p.ids, j.JobID)
	}
	return p
}

// listAll follows next_cursor from path (which has a query) to the end.
func (e *env) listAll(path string) (ids []string, pages []page) {
	e.t.Helper()
	p := e.listPage(path)
	for {
		pages = append(pages, p)
		ids = append(ids, p.ids...)
		if p.next == nil {
			return ids, pages
		}
		if len(pages) > 100 {
			e.t.Fatalf("%s: more than 100 pages", path)
		}
		p = e.listPage(path + "&cursor=" + url.QueryEscape(*p.next))
	}
}

// GET /dlq pages with a cursor, the most recently failed first (ties by
// id, newest first), each entry once.
func TestDLQPagesWithCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var want []string
	for range 7 {
		want = append(want, e.submit(`{"name":"dead"}`).JobID)
	}
	e.submit(`{"name":"alive"}`)
	// Failed at three moments: jobs 0-2 first, 3-4 next, 5-6 last (ties).
	e.exec(`UPDATE jobs SET status = 'failed', dead_reason = 'permanent',
		finished_at = timestamptz '2030-01-01 00:00:00.000001Z' + (CASE WHEN id <= $1 THEN 0 WHEN id <= $2 THEN 1 ELSE 2 END) * interval '1 second'
		WHERE name = 'dead'`, want[2], want[4])
	slices.Reverse(want) // most recently failed first; within a moment, newest id first

	got, pages := e.listAll("/dlq?limit=3")
	if !slices.Equal(got, want) || len(pages) != 3 {
		t.Errorf("DLQ in pages of 3 = %v in %d pages, want %v in 3", got, len(pages), want)
	}
	if status, body := e.do("GET", "/dlq?cursor=nope", ""); status != http.StatusBadRequest ||
		!strings.Contains(string(body), wire.CodeInvalidField) {
		t.Errorf("bad cursor: %d %.200s, want 400 %s", status, body, wire.CodeInvalidField)
	}
}

// A page's payloads are bounded in bytes, whatever the limit: the page
// stops early and next_cursor leads on to the rest.
func TestListBytesBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n, payload = 12, 1 << 20
	e.exec(`INSERT INTO jobs (name, payload, status, finished_at, dead_reason)
		SELECT 'big', to_jsonb(repeat('x', $1)), 'failed', now(), 'permanent' FROM generate_series(1, $2)`, payload, n)
	for _, path := range []string{"/jobs?limit=1000", "/dlq?limit=1000"} {
		ids, pages := e.listAll(path)
		if len(ids) != n {
			t.Errorf("%s: %d jobs over all pages, want %d", path, len(ids), n)
		}
		if len(pages) < 2 {
			t.Errorf("%s: one page of %d bytes holds all %d jobs of 1 MiB", path, pages[0].bytes, n)
		}
		for i, p := range pages {
			if p.bytes > 9<<20 {
				t.Errorf("%s: page %d is %d bytes, want at most 8 MiB of payloads", path, i, p.bytes)
			}
		}
	}
}
