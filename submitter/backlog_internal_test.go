package submitter

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// TestBacklogCountRacingAnAcceptance: a count whose snapshot was taken
// before a job was accepted (so it does not see it) must not erase that
// job from the tally when it lands. Seen in CI under load: a slow count
// answered 0 after the first job's acceptance had made the guard full,
// and the next submission was let in.
func TestBacklogCountRacingAnAcceptance(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	g := &backlogGuard{max: 1, interval: time.Hour, log: slog.New(slog.DiscardHandler),
		count: func(context.Context, int64) (int64, error) {
			close(started)
			<-release
			return 0, nil // its snapshot predates the acceptance below
		}}
	done := make(chan struct{})
	go func() { defer close(done); g.check(t.Context()) }()
	<-started
	g.accepted(1)
	if g.admit() {
		t.Fatal("admitted with one due job and a bound of one")
	}
	close(release)
	<-done
	if g.admit() {
		t.Error("a count that could not see the accepted job erased it: admitted again")
	}
}
