package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Queues (migration 009). Every job names a queue; the queues table holds
// only what an operator set: paused, and a cap on how many of a queue's
// jobs are leased at once. The submitter writes it (audited, admin scope);
// the leader reads it (QueueSettingsList) to decide whether a claim must
// know about queues at all, and dts_claim_queue_jobs reads it again inside
// each such claim, so a pause or cap holds even before the leader's copy
// is fresh. Nothing here is on the path of a claim when no queue is
// paused or capped.

// Audit actions and target of the queue routes.
const (
	AuditQueuePause       = "queue.pause"
	AuditQueueResume      = "queue.resume"
	AuditQueueConcurrency = "queue.concurrency"
	AuditTargetQueue      = "queue"
)

// QueueSetting is one row of queues.
type QueueSetting struct {
	Name        string
	Paused      bool
	Concurrency int // 0: no cap
	UpdatedAt   time.Time
}

// QueueStats is one queue as GET /queues shows it.
type QueueStats struct {
	Name string
	// Depth is how many of its jobs are due and waiting; Pending counts
	// those not due yet too.
	Depth, Pending int64
	// OldestAge is how long (seconds) its oldest due job has waited.
	OldestAge float64
	// Running is how many are leased now.
	Running int64
	// Completed and Failed count the jobs that finished so in the last
	// minute.
	Completed, Failed int64
	// Dead counts its failed jobs (the dead-letter queue's), whenever
	// they failed.
	Dead        int64
	Paused      bool
	Concurrency int
}

func scanQueueSetting(row pgx.Row) (QueueSetting, error) {
	var s QueueSetting
	err := row.Scan(&s.Name, &s.Paused, &s.Concurrency, &s.UpdatedAt)
	return s, err
}

// QueueSettingsList returns the queues that are paused or capped, by name.
func (s *Store) QueueSettingsList(ctx context.Context) ([]QueueSetting, error) {
	rows, err := s.pool.Query(ctx, q("QueueSettingsList"))
	if err != nil {
		return nil, fmt.Errorf("list queue settings: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueSetting, error) { return scanQueueSetting(r) })
	if err != nil {
		return nil, fmt.Errorf("list queue settings: %w", interpretError(err))
	}
	return out, nil
}

// QueueSetPaused pauses or resumes a queue (its row is created if need
// be) and returns its settings. Pausing stops new leases only: its jobs
// already leased run to their end.
func (s *Store) QueueSetPaused(ctx context.Context, name string, paused bool) (QueueSetting, error) {
	qs, err := scanQueueSetting(s.pool.QueryRow(ctx, q("QueueSetPaused"), name, paused))
	if err != nil {
		return qs, fmt.Errorf("set queue %q paused: %w", name, interpretError(err))
	}
	return qs, nil
}

// QueueSetConcurrency caps how many of a queue's jobs may be leased at
// once across the cluster (0: no cap) and returns its settings. Jobs
// leased beyond a lowered cap run to their end.
func (s *Store) QueueSetConcurrency(ctx context.Context, name string, n int) (QueueSetting, error) {
	qs, err := scanQueueSetting(s.pool.QueryRow(ctx, q("QueueSetConcurrency"), name, n))
	if err != nil {
		return qs, fmt.Errorf("set queue %q concurrency: %w", name, interpretError(err))
	}
	return qs, nil
}

// QueueStatsList counts each queue's jobs (see QueueStats) and adds its
// settings: every queue with jobs waiting, running, dead or finished in the
// last minute, and every queue with a row. It reads the waiting, running and
// recently finished jobs through their partial indexes, with sequential
// scans off: on a table of finished jobs a scan read them all.
func (s *Store) QueueStatsList(ctx context.Context) ([]QueueStats, error) {
	var out []QueueStats
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, q("QueueStatsListSeqscanOff")); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, q("QueueStatsList"))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueStats, error) {
			var st QueueStats
			err := r.Scan(&st.Name, &st.Depth, &st.Pending, &st.OldestAge, &st.Running, &st.Completed, &st.Failed,
				&st.Dead, &st.Paused, &st.Concurrency)
			return st, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", interpretError(err))
	}
	return out, nil
}
