package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// JobCountState counts the jobs in one state.
func (s *Store) JobCountState(ctx context.Context, state job.State) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, q("JobCountState"), string(state)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s jobs: %w", state, interpretError(err))
	}
	return n, nil
}

// Stats is a snapshot of the system for /stats and the metrics.
type Stats struct {
	ByState          map[job.State]int64
	QueueDepth       int64 // pending or retrying and due now
	DeadDepth        int64 // failed
	WorkersByState   map[string]int64
	OldestPendingAge float64 // seconds the oldest due job has waited; 0 if none
	// OldestHandledAge is OldestPendingAge among the names a live worker
	// handles (as Unhandled tells live): the wait dispatch is answerable
	// for, which a misspelled name does not drive.
	OldestHandledAge float64
	// Unhandled counts pending and retrying jobs (due or not) by name, for
	// the names no live worker (available or busy) handles, "*" handling
	// every name: the MaxUnhandledNames largest; UnhandledOther sums the
	// rest. Live means as the leader last wrote the workers table (every
	// second); with no leader it goes stale.
	Unhandled      map[string]int64
	UnhandledOther int64
	// Starved maps each name whose oldest due job has waited longer than
	// StarvedAfter although a worker handling it has a free slot (as the
	// leader last wrote the workers table) to that wait in seconds: at most
	// MaxUnhandledNames names, the longest waits. Jobs with a limit_key and
	// jobs of paused or capped queues are not counted: they may wait by
	// design.
	Starved map[string]float64
}

// MaxUnhandledNames bounds Stats.Unhandled and Stats.Starved: submitted
// names are user input.
const MaxUnhandledNames = 100

// StarvedAfter is how long a due job may wait beside a free worker that
// handles its name before Stats.Starved names it. Dispatch leases such a
// job within one round (milliseconds); the margin covers the leader's
// worker sync (every second) and a change of leader.
const StarvedAfter = 30 * time.Second

// JobCountDue counts the due jobs waiting for a worker (pending or
// retrying, due now), stopping at limit: the cost is bounded by the limit,
// not by the backlog, so it can run every second whatever the table holds.
// It reads only jobs_queue_due_idx (every waiting job: jobs_name_due_idx holds
// only those without a limit_key).
func (s *Store) JobCountDue(ctx context.Context, limit int64) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A sequential scan would read every finished job before it
		// stops; the partial index holds only the waiting ones.
		if _, err := tx.Exec(ctx, q("JobCountDueSeqscanOff")); err != nil {
			return err
		}
		return tx.QueryRow(ctx, q("JobCountDue"), limit).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("count due jobs: %w", interpretError(err))
	}
	return n, nil
}

// StatsGet counts jobs by state, the due queue, the DLQ, workers by state
// and the waiting jobs no live worker handles, by name. Counting every job
// by state reads the whole table, so it runs with sequential scans on even
// in a pool opened with PinIndexPlans; the unhandled count, last, turns
// them off again to read only the waiting jobs through jobs_queue_due_idx.
func (s *Store) StatsGet(ctx context.Context) (Stats, error) {
	st := Stats{ByState: map[job.State]int64{}, WorkersByState: map[string]int64{}, Unhandled: map[string]int64{},
		Starved: map[string]float64{}}
	for _, v := range job.States {
		st.ByState[v] = 0
	}
	for _, v := range []string{"available", "busy", "unavailable", "draining"} {
		st.WorkersByState[v] = 0
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, q("StatsGetSeqscanOn")); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, q("StatsGetByState"))
		if err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
		for rows.Next() {
			var state string
			var n int64
			if err := rows.Scan(&state, &n); err != nil {
				rows.Close()
				return fmt.Errorf("count jobs: %w", err)
			}
			st.ByState[job.State(state)] = n
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
		st.DeadDepth = st.ByState[job.StateFailed]
		rows, err = tx.Query(ctx, q("StatsGetWorkers"))
		if err != nil {
			return fmt.Errorf("count workers: %w", err)
		}
		for rows.Next() {
			var state string
			var n int64
			if err := rows.Scan(&state, &n); err != nil {
				rows.Close()
				return fmt.Errorf("count workers: %w", err)
			}
			st.WorkersByState[state] = n
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("count workers: %w", err)
		}
		if _, err := tx.Exec(ctx, q("StatsGetSeqscanOff")); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, q("StatsGetDue")).Scan(&st.QueueDepth, &st.OldestPendingAge, &st.OldestHandledAge); err != nil {
			return fmt.Errorf("count due jobs: %w", err)
		}
		rows, err = tx.Query(ctx, q("StatsGetUnhandled"), MaxUnhandledNames)
		if err != nil {
			return fmt.Errorf("count unhandled jobs: %w", err)
		}
		for rows.Next() {
			var name *string
			var n int64
			if err := rows.Scan(&name, &n); err != nil {
				rows.Close()
				return fmt.Errorf("count unhandled jobs: %w", err)
			}
			if name == nil {
				st.UnhandledOther = n
			} else {
				st.Unhandled[*name] = n
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("count unhandled jobs: %w", err)
		}
		rows, err = tx.Query(ctx, q("StatsGetStarved"), StarvedAfter.Seconds(), MaxUnhandledNames)
		if err != nil {
			return fmt.Errorf("find starved names: %w", err)
		}
		for rows.Next() {
			var name string
			var waited float64
			if err := rows.Scan(&name, &waited); err != nil {
				rows.Close()
				return fmt.Errorf("find starved names: %w", err)
			}
			st.Starved[name] = waited
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("find starved names: %w", err)
		}
		return nil
	})
	return st, interpretError(err)
}
