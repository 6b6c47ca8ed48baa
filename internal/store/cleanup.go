package store

import (
	"context"
	"fmt"
	"time"
)

// JobCleanup deletes, in batches of up to batch rows, completed and canceled
// jobs finished more than doneAge ago and failed ones finished more than
// failedAge ago, with their job_events rows, but not the jobs a batch
// callback still waits on (their outcomes are its payload). It returns how
// many rows it deleted. A batch of 0 or less means 1000 (LIMIT 0 would
// delete nothing and loop forever).
func (s *Store) JobCleanup(ctx context.Context, epoch int64, doneAge, failedAge time.Duration, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	for {
		var n int64
		if err := s.pool.QueryRow(ctx, q("JobCleanup"), millis(doneAge), millis(failedAge), batch, epoch).Scan(&n); err != nil {
			return total, fmt.Errorf("clean up jobs: %w", interpretError(err))
		}
		total += n
		if n < int64(batch) || ctx.Err() != nil {
			return total, nil
		}
	}
}
