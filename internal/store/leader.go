package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// leaderLockKey is the session advisory lock only the leader coordinator holds.
const leaderLockKey = 727_002

// Elector holds one dedicated connection for leader election. Leadership is
// a session advisory lock: it is held exactly as long as that connection
// lives, so a leader that dies (or loses PostgreSQL) releases it, and a
// standby polling TryAcquire takes over. Correctness never depends on a
// single leader: every state change is guarded by state and lease token, so a
// deposed leader that has not yet noticed can only lose races, not corrupt.
type Elector struct {
	url  string
	id   string
	conn *pgx.Conn
}

// NewElector prepares an elector for coordinator id.
func NewElector(databaseURL, id string) *Elector {
	return &Elector{url: databaseURL, id: id}
}

// TryAcquire tries to become leader. On success it bumps and returns the
// leader epoch. It returns (0, nil) while another coordinator leads.
func (e *Elector) TryAcquire(ctx context.Context) (int64, error) {
	if e.conn == nil || e.conn.IsClosed() {
		conn, err := pgx.Connect(ctx, e.url)
		if err != nil {
			return 0, fmt.Errorf("elector connect: %w", err)
		}
		e.conn = conn
	}
	var got bool
	if err := e.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, leaderLockKey).Scan(&got); err != nil {
		e.close()
		return 0, fmt.Errorf("try leader lock: %w", err)
	}
	if !got {
		return 0, nil
	}
	var epoch int64
	if err := e.conn.QueryRow(ctx, `UPDATE coordinator_leader SET epoch = epoch + 1, leader_id = $1, acquired_at = now()
		WHERE id = 1 RETURNING epoch`, e.id).Scan(&epoch); err != nil {
		e.close()
		return 0, fmt.Errorf("bump leader epoch: %w", err)
	}
	return epoch, nil
}

// Check confirms leadership is still held (the lock's connection is alive
// and the epoch is still ours).
func (e *Elector) Check(ctx context.Context, epoch int64) error {
	if e.conn == nil || e.conn.IsClosed() {
		return fmt.Errorf("leader connection closed")
	}
	var cur int64
	if err := e.conn.QueryRow(ctx, `SELECT epoch FROM coordinator_leader WHERE id = 1`).Scan(&cur); err != nil {
		e.close()
		return fmt.Errorf("check leadership: %w", err)
	}
	if cur != epoch {
		e.close()
		return fmt.Errorf("deposed: epoch is %d, ours was %d", cur, epoch)
	}
	return nil
}

// Release gives up leadership by closing the lock's connection.
func (e *Elector) Release() { e.close() }

func (e *Elector) close() {
	if e.conn != nil {
		_ = e.conn.Close(context.Background())
		e.conn = nil
	}
}

// LeaderGet returns the current epoch and leader id as recorded.
func (s *Store) LeaderGet(ctx context.Context) (int64, string, error) {
	var epoch int64
	var id *string
	if err := s.pool.QueryRow(ctx, `SELECT epoch, leader_id FROM coordinator_leader WHERE id = 1`).Scan(&epoch, &id); err != nil {
		return 0, "", fmt.Errorf("get leader: %w", interpretError(err))
	}
	if id == nil {
		return epoch, "", nil
	}
	return epoch, *id, nil
}
