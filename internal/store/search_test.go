package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// A search goes back a step of ids at a time, applies the list's
// filters, fills a page and says where the next starts; when its budget
// runs out it stops between steps, without an error, and says where.
func TestJobSearch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// ids 1..20: every third holds "needle"; 6 and 12 in queue q2.
	e.exec(t, `INSERT INTO jobs (name, queue, payload)
		SELECT 'n', CASE WHEN i IN (6, 12) THEN 'q2' ELSE 'default' END,
			jsonb_build_object('i', i, 'text', CASE WHEN i % 3 = 0 THEN 'a needle here' ELSE 'hay' END)
		FROM generate_series(1, 20) i`)
	ids := func(js []*job.Job) []int64 {
		out := make([]int64, len(js))
		for i, j := range js {
			out[i] = j.ID
		}
		return out
	}
	search := func(p store.JobSearchParams) store.JobSearchResult {
		t.Helper()
		if p.Budget == 0 {
			p.Budget = 10 * time.Second
		}
		res, err := e.s.JobSearch(e.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := search(store.JobSearchParams{List: store.JobListParams{Limit: 4}, Scan: store.JobScan{Text: "needle"}, Span: 4})
	if got := ids(res.Jobs); len(got) != 4 || got[0] != 18 || got[3] != 9 || res.Next != 9 || res.Stopped {
		t.Errorf("first page: %v next %d stopped %v, want [18 15 12 9] next 9", got, res.Next, res.Stopped)
	}
	res = search(store.JobSearchParams{List: store.JobListParams{Limit: 4, Before: 9}, Scan: store.JobScan{Text: "needle"}, Span: 4})
	if got := ids(res.Jobs); len(got) != 2 || got[0] != 6 || got[1] != 3 || res.Next != 0 || res.Stopped {
		t.Errorf("last page: %v next %d, want [6 3] next 0", got, res.Next)
	}
	res = search(store.JobSearchParams{List: store.JobListParams{Limit: 50, Queue: "q2"}, Scan: store.JobScan{Text: `"a needle`}, Span: 7})
	if got := ids(res.Jobs); len(got) != 2 || got[0] != 12 || got[1] != 6 {
		t.Errorf("queue q2: %v, want [12 6]", got)
	}
	if res = search(store.JobSearchParams{List: store.JobListParams{Limit: 50}, Scan: store.JobScan{Text: "nothing like it"}}); len(res.Jobs) != 0 || res.Next != 0 {
		t.Errorf("no match: %+v", res)
	}
	// A page is cut at MaxBytes, after its first job at least.
	res = search(store.JobSearchParams{List: store.JobListParams{Limit: 4, MaxBytes: 1}, Scan: store.JobScan{Text: "needle"}, Span: 4})
	if got := ids(res.Jobs); len(got) != 1 || got[0] != 18 || res.Next != 18 {
		t.Errorf("MaxBytes 1: %v next %d, want [18] next 18", got, res.Next)
	}
	res = search(store.JobSearchParams{List: store.JobListParams{Limit: 4, MaxBytes: 1}, Scan: store.JobScan{Text: "needle"}, Span: 100})
	if got := ids(res.Jobs); len(got) != 1 || got[0] != 18 || res.Next != 18 {
		t.Errorf("MaxBytes 1, one step: %v next %d, want [18] next 18", got, res.Next)
	}
	res = search(store.JobSearchParams{List: store.JobListParams{Limit: 50}, Scan: store.JobScan{Text: "needle"}, Budget: time.Nanosecond})
	if !res.Stopped || res.Next != 21 || len(res.Jobs) != 0 {
		t.Errorf("no budget: %v next %d stopped %v, want stopped at 21", ids(res.Jobs), res.Next, res.Stopped)
	}
	// The other tests: a value at a path of the payload, the worker, the
	// last error (in any case); together they must all hold.
	e.exec(t, `UPDATE jobs SET worker_id = 'w' || (id % 2), last_error = CASE WHEN id % 4 = 0 THEN 'Connection REFUSED by ' || id END
		WHERE id <= 20`)
	e.exec(t, `UPDATE jobs SET payload = payload || '{"user": {"id": 7, "tags": ["x", "vip"]}}' WHERE id IN (4, 8, 9)`)
	for _, tc := range []struct {
		scan store.JobScan
		want []int64
	}{
		{store.JobScan{Path: []string{"user", "id"}, PathValue: "7"}, []int64{9, 8, 4}},
		{store.JobScan{Path: []string{"user", "tags", "1"}, PathValue: "vip"}, []int64{9, 8, 4}},
		{store.JobScan{Path: []string{"text"}, PathValue: "a needle here"}, []int64{18, 15, 12, 9, 6, 3}},
		{store.JobScan{Path: []string{"user", "id"}, PathValue: "8"}, []int64{}},
		{store.JobScan{Path: []string{"nope"}, PathValue: ""}, []int64{}},
		{store.JobScan{Worker: "w1"}, []int64{19, 17, 15, 13, 11, 9, 7, 5, 3, 1}},
		{store.JobScan{Error: "connection refused"}, []int64{20, 16, 12, 8, 4}},
		{store.JobScan{Error: "refused by 1"}, []int64{16, 12}},
		{store.JobScan{Worker: "w0", Error: "refused", Path: []string{"user", "id"}, PathValue: "7"}, []int64{8, 4}},
		{store.JobScan{Worker: "w1", Text: "needle"}, []int64{15, 9, 3}},
	} {
		res := search(store.JobSearchParams{List: store.JobListParams{Limit: 50}, Scan: tc.scan, Span: 6})
		if got := ids(res.Jobs); fmt.Sprint(got) != fmt.Sprint(tc.want) || res.Next != 0 {
			t.Errorf("%+v: %v next %d, want %v", tc.scan, got, res.Next, tc.want)
		}
	}
}
