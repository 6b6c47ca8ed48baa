package coordinator

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// TestStaleResultsOnTimeline: the result applier records the results it
// rejects as stale on their jobs' timelines (job_events), at most
// store.MaxStaleEventsPerBatch of one batch, but not a duplicate of the
// result that was applied; all of them are counted in
// dts_stale_results_total, and the good results of the batch apply.
func TestStaleResultsOnTimeline(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(2, "w")
	done, victim := cs[0], cs[1]
	// One batch (the applier starts after they are all on the stream): a
	// completion, its duplicate, a result under another worker's name
	// with the victim's real token, and a flood of forged tokens.
	rs := []wire.Result{completed(done, `1`), completed(done, `1`)}
	wrongName := completed(victim, `"mine"`)
	wrongName.WorkerID = "intruder"
	rs = append(rs, wrongName)
	const flood = 150
	for i := range flood {
		f := completed(victim, `"forged"`)
		f.LeaseToken = victim.LeaseToken + int64(i) + 1
		rs = append(rs, f)
	}
	r.sendResults(rs...)
	r.start(r.results())
	testwait.For(t, 10*time.Second, "the batch applied and acknowledged", func() bool {
		n, _ := r.rdb.XLen(r.ctx, r.keys.Results()).Result()
		return n == 0 && r.states(cs)[done.ID] == "completed"
	})
	stale := 2 + flood
	if got := testutil.ToFloat64(r.b.metrics.staleResults); int(got) != stale {
		t.Errorf("dts_stale_results_total = %v, want %d", got, stale)
	}
	count := func(id int64) int {
		var n int
		if err := r.db.QueryRow(r.ctx, `SELECT count(*) FROM job_events WHERE job_id = $1 AND kind = 'stale_result'`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(done.ID); n != 0 {
		t.Errorf("the completed job has %d stale results recorded, want 0 (its duplicate is the applied result again)", n)
	}
	if n := count(victim.ID); n != store.MaxStaleEventsPerBatch-1 {
		t.Errorf("the victim has %d stale results recorded, want %d (the batch's first %d, less the duplicate's)",
			n, store.MaxStaleEventsPerBatch-1, store.MaxStaleEventsPerBatch)
	}
	if st := r.states([]store.Claimed{victim}); st[victim.ID] != "leased" {
		t.Errorf("the victim is %s, want still leased", st[victim.ID])
	}

	// The duplicate is the applied result again: the timeline shows the
	// completion alone.
	j, evs, err := r.store.JobTimelineGet(r.ctx, done.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 0 || j.LastLeaseToken != done.LeaseToken {
		t.Errorf("the completed job's events = %+v, last_lease_token %d; want none, %d", evs, j.LastLeaseToken, done.LeaseToken)
	}
}
