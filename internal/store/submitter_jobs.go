package store

import (
	"context"
	"fmt"

	"github.com/dtsched/dts/internal/job"
)

// JobStateGetMany returns the current state of each job in ids that exists,
// in one round trip. The submitter uses it to answer a batch whose
// idempotency keys matched earlier jobs. Unknown ids are absent from the map.
func (s *Store) JobStateGetMany(ctx context.Context, ids []int64) (map[int64]job.State, error) {
	out := make(map[int64]job.State, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, q("JobStateGetMany"), ids)
	if err != nil {
		return nil, fmt.Errorf("get job states: %w", interpretError(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var state string
		if err := rows.Scan(&id, &state); err != nil {
			return nil, fmt.Errorf("get job states: %w", interpretError(err))
		}
		out[id] = job.State(state)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get job states: %w", interpretError(err))
	}
	return out, nil
}
