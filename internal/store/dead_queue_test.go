package store_test

import (
	"testing"

	"github.com/dtsched/dts/internal/store"
)

// TestDeadListPageByQueue: DeadListPage with a queue keeps that queue's
// dead jobs, in DLQ order, page by page; a queue that holds none (or does
// not exist) gives an empty page; live jobs of the queue are never listed.
func TestDeadListPageByQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ps []store.JobInsertParams
	for _, q := range []string{"mail", "default", "mail", "reports", "mail", "mail"} {
		ps = append(ps, store.JobInsertParams{Name: "d", Queue: q})
	}
	ids := e.insert(t, ps...)
	// ids[5] stays pending: a live job of the queue. The others die one
	// second apart, ids[0] first.
	e.exec(t, `UPDATE jobs SET status = 'failed', dead_reason = 'permanent',
		finished_at = now() - (10 - array_position($1::bigint[], id)) * interval '1 second' WHERE id = ANY($1)`, ids[:5])

	var got []int64
	p := store.DeadListParams{Queue: "mail", Limit: 1}
	for range 5 {
		dead, next, err := e.s.DeadListPage(e.ctx, p)
		if err != nil {
			t.Fatalf("DeadListPage %+v: %v", p, err)
		}
		for _, d := range dead {
			if d.Job.Queue != "mail" {
				t.Errorf("job %d of queue %q listed", d.Job.ID, d.Job.Queue)
			}
			got = append(got, d.Job.ID)
		}
		if next == nil {
			break
		}
		p.After = next
	}
	if want := []int64{ids[4], ids[2], ids[0]}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("mail's dead jobs, a page of 1 at a time = %v, want %v", got, want)
	}
	all, _, err := e.s.DeadListPage(e.ctx, store.DeadListParams{})
	if err != nil || len(all) != 5 {
		t.Errorf("without a queue: %d jobs, %v; want 5", len(all), err)
	}
	for _, q := range []string{"nosuch", "reportsx"} {
		if dead, next, err := e.s.DeadListPage(e.ctx, store.DeadListParams{Queue: q, Limit: 10}); err != nil || len(dead) != 0 || next != nil {
			t.Errorf("queue %q: %d jobs, next %v, %v; want none", q, len(dead), next, err)
		}
	}
	if dead, _, err := e.s.DeadListPage(e.ctx, store.DeadListParams{Queue: "reports"}); err != nil || len(dead) != 1 || dead[0].Job.ID != ids[3] {
		t.Errorf("queue reports: %+v, %v; want job %d", dead, err, ids[3])
	}
}
