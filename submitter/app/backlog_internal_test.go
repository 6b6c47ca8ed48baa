package app

import (
	"context"
	"log/slog"
	"testing"
)

// TestBacklogGuardNeverCountsAJobTwice: a job that a count started after
// its INSERT began has seen is not added again when its submission
// reports it accepted; one accepted between counts, or during or after a
// count that was sent before its INSERT, is added. When a count saw the
// job and answered before the submission added it, the guard refused
// below its bound: on a loaded machine
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

	// The INSERT began while a count ran whose snapshot missed the job,
	// and that count answered before the submission reported it: added.
	during = func() { m = g.mark() }
	g.check(ctx)
	during = nil
	db++
	g.accepted(1, m)
	if got := g.due.Load(); got != 3 {
		t.Fatalf("due %d with 3 jobs in the database, want 3: a job missed", got)
	}

	// Accepted while a count sent before its INSERT runs: the count's
	// answer (which missed it) carries it.
	during = func() {
		m = g.mark()
		g.accepted(1, m)
	}
	g.check(ctx)
	during = nil
	db++
	if got := g.due.Load(); got != 4 {
		t.Fatalf("due %d with 4 jobs in the database, want 4: a job missed", got)
	}
	if g.admit() {
		t.Error("admitted at the bound")
	}
}
