package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// WorkerRow is a worker as the leader coordinator sees it.
type WorkerRow struct {
	ID              string
	JobTypes        []string
	Concurrency     int
	State           string // available, busy, unavailable, draining
	InFlight        int
	LastHeartbeatAt time.Time
	LastAssignedAt  *time.Time
	Host, Version   string // from its heartbeats; "" when it does not say
	// DrainRequestedAt is when an operator asked that it get no new jobs
	// (WorkerDrain), by DrainRequestedBy; nil: never. WorkerSync leaves
	// both alone.
	DrainRequestedAt *time.Time
	DrainRequestedBy string
}

// WorkerSync writes the leader's view of the fleet: it upserts every worker
// in ws and marks every other recorded worker unavailable, in one statement.
func (s *Store) WorkerSync(ctx context.Context, epoch int64, ws []WorkerRow) error {
	n := len(ws)
	ids, states, types := make([]string, n), make([]string, n), make([]string, n)
	conc, inflight := make([]int32, n), make([]int32, n)
	beats, assigned := make([]time.Time, n), make([]*time.Time, n)
	hosts, versions := make([]string, n), make([]string, n)
	for i, w := range ws {
		hosts[i], versions[i] = w.Host, w.Version
		ids[i], states[i] = w.ID, w.State
		conc[i], inflight[i] = int32(w.Concurrency), int32(w.InFlight)
		beats[i], assigned[i] = w.LastHeartbeatAt, w.LastAssignedAt
		// text[][] must be rectangular, so job types travel as one string.
		types[i] = strings.Join(w.JobTypes, "\x1f")
	}
	_, err := s.pool.Exec(ctx, q("WorkerSync"),
		ids, types, conc, states, inflight, beats, assigned, epoch, hosts, versions)
	if err != nil {
		return fmt.Errorf("sync workers: %w", interpretError(err))
	}
	return nil
}

// WorkerDelete forgets a worker that left cleanly.
func (s *Store) WorkerDelete(ctx context.Context, epoch int64, id string) error {
	if _, err := s.pool.Exec(ctx, q("WorkerDelete"), id, epoch); err != nil {
		return fmt.Errorf("delete worker %s: %w", id, interpretError(err))
	}
	return nil
}

// WorkerCleanup deletes workers unavailable and silent for longer than age
// (a worker id of hostname-pid is new at every restart) and returns how
// many it deleted.
func (s *Store) WorkerCleanup(ctx context.Context, epoch int64, age time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, q("WorkerCleanup"), millis(age), epoch)
	if err != nil {
		return 0, fmt.Errorf("clean up workers: %w", interpretError(err))
	}
	return tag.RowsAffected(), nil
}

// WorkerList returns every known worker.
func (s *Store) WorkerList(ctx context.Context) ([]WorkerRow, error) {
	rows, err := s.pool.Query(ctx, q("WorkerList"))
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", interpretError(err))
	}
	defer rows.Close()
	var out []WorkerRow
	for rows.Next() {
		var w WorkerRow
		if err := rows.Scan(workerDest(&w)...); err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		out = append(out, w)
	}
	return out, interpretError(rows.Err())
}

// WorkerGet returns one worker, or job.ErrNotFound.
func (s *Store) WorkerGet(ctx context.Context, id string) (WorkerRow, error) {
	var w WorkerRow
	err := s.pool.QueryRow(ctx, q("WorkerGet"), id).
		Scan(workerDest(&w)...)
	if err != nil {
		return w, fmt.Errorf("get worker %s: %w", id, interpretError(err))
	}
	return w, nil
}

// WorkerJobTypes returns, sorted, every job type a recorded worker names,
// whatever its state ("*" included when one names it).
func (s *Store) WorkerJobTypes(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, q("WorkerJobTypes"))
	if err != nil {
		return nil, fmt.Errorf("list worker job types: %w", interpretError(err))
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list worker job types: %w", interpretError(err))
	}
	return types, nil
}

// workerDest lists where a {{workerColumns}} row is scanned.
func workerDest(w *WorkerRow) []any {
	return []any{&w.ID, &w.JobTypes, &w.Concurrency, &w.State, &w.InFlight, &w.LastHeartbeatAt, &w.LastAssignedAt,
		&w.Host, &w.Version, &w.DrainRequestedAt, &w.DrainRequestedBy}
}

// WorkerDrain records an operator's request (by actor) that a worker get
// no new jobs, and returns its row; a repeated request keeps the first
// one's time and actor. An unknown id is job.ErrNotFound. The leader reads
// the flag at its next worker sync (WorkerDrainList). The request stands,
// through the worker's crashes and restarts under the same id, until
// WorkerUndrain or until the row is deleted (a clean stop, retention).
func (s *Store) WorkerDrain(ctx context.Context, id, actor string) (WorkerRow, error) {
	var w WorkerRow
	if err := s.pool.QueryRow(ctx, q("WorkerDrain"), id, actor).Scan(workerDest(&w)...); err != nil {
		return w, fmt.Errorf("drain worker %s: %w", id, interpretError(err))
	}
	return w, nil
}

// WorkerUndrain withdraws an operator's request that a worker get no new
// jobs, and returns its row; a worker not asked to drain is left as it is.
// An unknown id is job.ErrNotFound. The leader stops holding the worker
// back at its next worker sync (WorkerDrainList no longer names it).
func (s *Store) WorkerUndrain(ctx context.Context, id string) (WorkerRow, error) {
	var w WorkerRow
	if err := s.pool.QueryRow(ctx, q("WorkerUndrain"), id).Scan(workerDest(&w)...); err != nil {
		return w, fmt.Errorf("undrain worker %s: %w", id, interpretError(err))
	}
	return w, nil
}

// WorkerDrainList returns the ids of the workers an operator asked to
// drain, sorted.
func (s *Store) WorkerDrainList(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, q("WorkerDrainList"))
	if err != nil {
		return nil, fmt.Errorf("list drained workers: %w", interpretError(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list drained workers: %w", interpretError(err))
	}
	return ids, nil
}

// WorkerLeasedJobs returns the ids of the leased jobs by worker id, each
// list sorted (at most a worker's concurrency each).
func (s *Store) WorkerLeasedJobs(ctx context.Context) (map[string][]int64, error) {
	rows, err := s.pool.Query(ctx, q("WorkerLeasedJobs"))
	if err != nil {
		return nil, fmt.Errorf("list leased jobs: %w", interpretError(err))
	}
	defer rows.Close()
	out := map[string][]int64{}
	for rows.Next() {
		var id string
		var jobs []int64
		if err := rows.Scan(&id, &jobs); err != nil {
			return nil, fmt.Errorf("list leased jobs: %w", err)
		}
		out[id] = jobs
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list leased jobs: %w", interpretError(err))
	}
	return out, nil
}
