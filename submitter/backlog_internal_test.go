package submitter

import (
	"context"
	"log/slog"
	"testing"
)

// TestBacklogGuardNeverCountsAJobTwice: a job whose INSERT began before a
// count, and that the count saw, is not added again when its submission
// reports it accepted; one accepted while no count ran is added. A count
// that saw the job and stored its answer before the submission added it
// made the guard refuse below its bound: on a loaded machine
// TestMaxBacklogRefusesSubmissionsUntilWorkersCatchUp was refused with 2
// due jobs for a bound of 3.
func TestBacklogGuardNeverCountsAJobTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := int64(0) // the due jobs a count finds
	var during func()
	g := &backlogGuard{max: 3, log: slog.New(slog.DiscardHandler), count: func(context.Context, int64) (int64, error) {
		if during != nil {
			during()
		}
		return db, nil
	}}
	g.check(ctx)

	// Inserted and accepted between two counts: added.
	m := g.mark()
	db++
	g.accepted(1, m)
	if got := g.due.Load(); got != 1 {
		t.Fatalf("due %d after one job accepted between counts, want 1", got)
	}
	g.check(ctx)

	// Committed, then a count saw it before the submission reported it.
	m = g.mark()
	db++
	g.check(ctx)
	g.accepted(1, m)
	if got := g.due.Load(); got != 2 {
		t.Fatalf("due %d with 2 jobs in the database, want 2: a job counted twice", got)
	}

	// The INSERT began while a count ran, and committed before the count's
	// snapshot: the count saw it.
	during = func() {
		m = g.mark()
		db++
	}
	g.check(ctx)
	during = nil
	g.accepted(1, m)
	if got := g.due.Load(); got != 3 {
		t.Fatalf("due %d with 3 jobs in the database, want 3", got)
	}
	if g.admit() {
		t.Error("admitted at the bound")
	}
}
