package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MaxRollupNames is how many job names get rows of their own in one
// minute of the rollup (the busiest); every name counts in the total row.
const MaxRollupNames = 50

// RollupRow is one minute of the rollup (migrations/011_rollup.up.sql):
// for one job name, or for every name together when Name is "".
type RollupRow struct {
	Minute    time.Time
	Name      string
	Completed int64
	Failed    int64
	Started   int64
	// StartP50, StartP95: submit-to-start of the jobs started in the
	// minute, in milliseconds; nil when none started.
	StartP50, StartP95 *float64
	// QueueDepth, OldestPending: the due jobs and the oldest one's wait in
	// seconds, when the row was written.
	QueueDepth    int64
	OldestPending float64
}

// RollupWrite writes the rows of the minute that starts at minute (which
// must have ended, and is truncated to the minute), as the leader of
// epoch. Rows of that minute already written are kept. It returns how
// many rows it wrote.
func (s *Store) RollupWrite(ctx context.Context, epoch int64, minute time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, q("RollupWrite"), minute.Truncate(time.Minute), epoch, MaxRollupNames)
	if err != nil {
		return 0, fmt.Errorf("write the rollup of %s: %w", minute.UTC().Format("15:04"), interpretError(err))
	}
	return tag.RowsAffected(), nil
}

// RollupCleanup deletes the rollup rows older than age, as the leader of
// epoch, and returns how many it deleted.
func (s *Store) RollupCleanup(ctx context.Context, epoch int64, age time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, q("RollupCleanup"), millis(age), epoch)
	if err != nil {
		return 0, fmt.Errorf("clean up the rollup: %w", interpretError(err))
	}
	return tag.RowsAffected(), nil
}

// RollupRange returns the rollup rows of the minutes from since on,
// oldest first, every name's.
func (s *Store) RollupRange(ctx context.Context, since time.Time) ([]RollupRow, error) {
	rows, err := s.pool.Query(ctx, q("RollupRange"), since)
	if err != nil {
		return nil, fmt.Errorf("read the rollup: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RollupRow, error) {
		var v RollupRow
		err := r.Scan(&v.Minute, &v.Name, &v.Completed, &v.Failed, &v.Started, &v.StartP50, &v.StartP95,
			&v.QueueDepth, &v.OldestPending)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the rollup: %w", interpretError(err))
	}
	return out, nil
}
