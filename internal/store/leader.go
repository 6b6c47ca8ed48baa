package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// Leadership is a lease with a time limit (coordinator_lease, migration
// 005), not a session lock: a frozen leader (SIGSTOP, a deadlock, a VM
// pause) loses it when it stops renewing, and it needs no session state, so
// it works through a pooler in transaction mode. Taking the lease bumps the
// epoch in coordinator_leader in the same transaction; every write a leader
// makes carries its epoch and is refused once a successor has bumped it
// (dts_fence in functions.sql), so a deposed leader that wakes up changes
// nothing.

// stuckFenceAge is how long a fenced write of a leader whose lease has run
// out may stay open before its successor ends it: fenced writes take
// milliseconds, so one older than this belongs to a leader that stopped in
// the middle of it.
const stuckFenceAge = time.Second

// LeaderAcquire takes the leader lease for holder if it is free (never
// taken, expired, or given up), for ttl, and returns the new epoch. It
// returns (0, nil) while another holder's lease runs.
func (s *Store) LeaderAcquire(ctx context.Context, holder string, ttl time.Duration) (int64, error) {
	var epoch int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, q("LeaderAcquireLease"), holder, millis(ttl))
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		// The previous leader's lease has run out: a fenced write of its
		// still open after stuckFenceAge is stuck (it froze mid-write), and
		// is ended rather than waited for.
		if _, err := tx.Exec(ctx, q("LeaderAcquireEndStuckFence"), millis(stuckFenceAge)); err != nil {
			return err
		}
		// Waits for the fenced writes of the previous leader in progress,
		// at most stuckFenceAge: a write younger than that when the lease
		// ran out may be a frozen one too, and the election's next try
		// ends it (the election loop's context has no deadline).
		if _, err := tx.Exec(ctx, q("LeaderAcquireLockTimeout"), strconv.FormatInt(stuckFenceAge.Milliseconds(), 10)); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, q("LeaderAcquireEpoch"), holder).Scan(&epoch); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, q("LeaderAcquireLeaseEpoch"), epoch)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("acquire leadership: %w", interpretError(err))
	}
	return epoch, nil
}

// LeaderRenew extends the lease of epoch to ttl from now. It fails with
// job.ErrDeposed when another coordinator has taken the lease (the epoch
// moved on). A lease that ran out but that nobody took is renewed: the
// epoch is still this leader's, so no other leader has acted (a leader
// paused longer than the lease, with no standby, goes on leading).
func (s *Store) LeaderRenew(ctx context.Context, epoch int64, ttl time.Duration) error {
	tag, err := s.pool.Exec(ctx, q("LeaderRenew"), epoch, millis(ttl))
	if err != nil {
		return fmt.Errorf("renew leadership: %w", interpretError(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("renew leadership of epoch %d: %w", epoch, job.ErrDeposed)
	}
	return nil
}

// LeaderResign ends the lease of epoch at once, so that a standby takes
// over at its next try (a clean shutdown).
func (s *Store) LeaderResign(ctx context.Context, epoch int64) error {
	if _, err := s.pool.Exec(ctx, q("LeaderResign"), epoch); err != nil {
		return fmt.Errorf("resign leadership: %w", interpretError(err))
	}
	return nil
}

// LeaderGet returns the current epoch and leader id as recorded.
func (s *Store) LeaderGet(ctx context.Context) (int64, string, error) {
	var epoch int64
	var id *string
	if err := s.pool.QueryRow(ctx, q("LeaderGet")).Scan(&epoch, &id); err != nil {
		return 0, "", fmt.Errorf("get leader: %w", interpretError(err))
	}
	if id == nil {
		return epoch, "", nil
	}
	return epoch, *id, nil
}

// IsDeposed reports whether err says the leader's epoch was superseded.
func IsDeposed(err error) bool { return errors.Is(err, job.ErrDeposed) }
