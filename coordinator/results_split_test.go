package coordinator

import (
	"slices"
	"testing"

	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/wire"
)

// TestSplitProgress: progress reports come out, the latest per lease in
// stream order; the outcomes stay, in order (and without a copy when there
// is no report, the common case).
func TestSplitProgress(t *testing.T) {
	rr := func(id string, job, token int64, outcome string, pct int) queue.ReceivedResult {
		return queue.ReceivedResult{ID: id, Result: wire.Result{JobID: job, LeaseToken: token, Outcome: outcome, Progress: pct}}
	}
	plain := []queue.ReceivedResult{rr("1", 1, 10, wire.OutcomeCompleted, 0), rr("2", 2, 20, wire.OutcomeFailed, 0)}
	rest, latest := splitProgress(plain)
	if len(latest) != 0 || len(rest) != 2 || &rest[0] != &plain[0] {
		t.Errorf("no progress: rest %v (a copy: %v), latest %v", rest, len(rest) > 0 && &rest[0] != &plain[0], latest)
	}
	mixed := []queue.ReceivedResult{
		rr("1", 1, 10, wire.OutcomeProgress, 10), rr("2", 2, 20, wire.OutcomeCompleted, 0),
		rr("3", 1, 10, wire.OutcomeProgress, 50), rr("4", 1, 11, wire.OutcomeProgress, 5),
		rr("5", 3, 30, wire.OutcomeReleased, 0),
	}
	rest, latest = splitProgress(mixed)
	var ids []string
	for _, r := range rest {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{"2", "5"}) {
		t.Errorf("rest = %v, want 2 and 5", ids)
	}
	if len(latest) != 2 || latest[0].Progress != 50 || latest[1].LeaseToken != 11 {
		t.Errorf("latest = %+v, want job 1 token 10 at 50, then token 11", latest)
	}
}

// TestEntryIDs: each entry once, whether its results are many (a batch) or
// one, and with the ids of undecodable results, which may repeat them.
func TestEntryIDs(t *testing.T) {
	rr := func(id string) queue.ReceivedResult { return queue.ReceivedResult{ID: id} }
	rs := []queue.ReceivedResult{rr("1-0"), rr("1-0"), rr("1-0"), rr("2-0"), rr("3-0"), rr("3-0")}
	if got := entryIDs(rs, nil); !slices.Equal(got, []string{"1-0", "2-0", "3-0"}) {
		t.Errorf("entryIDs(rs) = %v", got)
	}
	if got := entryIDs(rs, []string{"3-0", "4-0", "4-0"}); !slices.Equal(got, []string{"1-0", "2-0", "3-0", "4-0"}) {
		t.Errorf("entryIDs(rs, bad) = %v", got)
	}
	if got := entryIDs(nil, []string{"4-0", "4-0"}); !slices.Equal(got, []string{"4-0"}) {
		t.Errorf("entryIDs(nil, bad) = %v", got)
	}
	if got := entryIDs(nil, nil); len(got) != 0 {
		t.Errorf("entryIDs(nil, nil) = %v", got)
	}
}
