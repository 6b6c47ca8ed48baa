package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeadMeta is what the Redis dead-letter mirror holds of a dead job: ids
// and metadata, never the payload or the error history (PostgreSQL, GET
// /dlq, has those), so that the mirror's size is bounded whatever the jobs
// carry.
type DeadMeta struct {
	ID         int64
	Name       string
	Queue      string
	Attempts   int
	MaxRetries int
	LastError  string // cut to maxMirrorErrorLen bytes
	Reason     string
	CreatedAt  time.Time
	FinishedAt time.Time
}

// maxMirrorErrorLen bounds each mirrored error message.
const maxMirrorErrorLen = 512

// DeadMirrorPage returns up to limit dead jobs' metadata, newest first,
// after the cursor (the zero cursor: from the newest), and the cursor of
// the next page.
func (s *Store) DeadMirrorPage(ctx context.Context, after DeadCursor, limit int) ([]DeadMeta, DeadCursor, error) {
	first := after.ID == 0
	rows, err := s.pool.Query(ctx, q("DeadMirrorPage"), first, after.FinishedAt, after.ID, maxMirrorErrorLen, limit)
	if err != nil {
		return nil, after, fmt.Errorf("page dead jobs: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadMeta, error) {
		var d DeadMeta
		err := r.Scan(&d.ID, &d.Name, &d.Queue, &d.Attempts, &d.MaxRetries, &d.LastError, &d.Reason, &d.CreatedAt, &d.FinishedAt)
		return d, err
	})
	if err != nil {
		return nil, after, fmt.Errorf("page dead jobs: %w", interpretError(err))
	}
	next := after
	if n := len(out); n > 0 {
		next = DeadCursor{FinishedAt: out[n-1].FinishedAt, ID: out[n-1].ID}
	}
	return out, next, nil
}
