package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Periodic jobs (migration 007). The submitter creates, pauses, resumes,
// deletes and triggers schedules; the leader coordinator enqueues their
// ticks with ScheduleFire, fenced by its epoch. A tick is one job: the
// INSERT meets the unique index on (schedule_id, schedule_tick), and the
// schedule's next tick moves on in the same transaction, guarded by the
// value the leader looked at.

// Audit actions and target of the schedule routes.
const (
	AuditScheduleCreate  = "schedule.create"
	AuditSchedulePause   = "schedule.pause"
	AuditScheduleResume  = "schedule.resume"
	AuditScheduleDelete  = "schedule.delete"
	AuditScheduleTrigger = "schedule.trigger"
	AuditTargetSchedule  = "schedule"
)

// ScheduleJob is a schedule's job template.
type ScheduleJob struct {
	Name           string
	Queue          string
	Priority       int
	Payload        json.RawMessage
	MaxRetries     int
	TimeoutSeconds int
}

// Schedule is one row of schedules.
type Schedule struct {
	ID         int64
	Name       string
	Cron       string
	TimeZone   string
	Overlap    string // schedule.OverlapSkip or OverlapAllow
	CatchUp    string // schedule.CatchUpNone or CatchUpOne
	Paused     bool
	Job        ScheduleJob
	NextFireAt time.Time
	LastFireAt *time.Time
	LastJobID  int64 // 0: none yet
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// scanSchedule reads the columns of the fragment scheduleColumns
// (queries/schedule.sql), in its order.
func scanSchedule(row pgx.Row) (*Schedule, error) {
	var s Schedule
	if err := row.Scan(&s.ID, &s.Name, &s.Cron, &s.TimeZone, &s.Overlap, &s.CatchUp, &s.Paused, &s.Job.Name,
		&s.Job.Queue, &s.Job.Priority, &s.Job.Payload, &s.Job.MaxRetries, &s.Job.TimeoutSeconds, &s.NextFireAt,
		&s.LastFireAt, &s.LastJobID, &s.CreatedAt, &s.UpdatedAt); err != nil {
		return nil, interpretError(err)
	}
	return &s, nil
}

// ScheduleInsertParams is a schedule to create. Next gives the first tick
// after a time: it is called with PostgreSQL's now().
type ScheduleInsertParams struct {
	Name     string
	Cron     string
	TimeZone string
	Overlap  string
	CatchUp  string
	Job      ScheduleJob
	Next     func(after time.Time) time.Time
}

// ScheduleInsert creates a schedule whose first tick is the first after
// PostgreSQL's now(). A name already taken is job.ErrConflict.
func (s *Store) ScheduleInsert(ctx context.Context, p ScheduleInsertParams) (*Schedule, error) {
	var out *Schedule
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var now time.Time
		if err := tx.QueryRow(ctx, q("ScheduleInsertNow")).Scan(&now); err != nil {
			return err
		}
		payload := string(p.Job.Payload)
		if payload == "" {
			payload = "null"
		}
		var err error
		out, err = scanSchedule(tx.QueryRow(ctx, q("ScheduleInsert"), p.Name, p.Cron, p.TimeZone, p.Overlap, p.CatchUp,
			p.Job.Name, p.Job.Queue, p.Job.Priority, payload, p.Job.MaxRetries, p.Job.TimeoutSeconds, p.Next(now)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert schedule %q: %w", p.Name, interpretError(err))
	}
	return out, nil
}

// ScheduleGet returns one schedule, or job.ErrNotFound.
func (s *Store) ScheduleGet(ctx context.Context, id int64) (*Schedule, error) {
	sc, err := scanSchedule(s.pool.QueryRow(ctx, q("ScheduleGet"), id))
	if err != nil {
		return nil, fmt.Errorf("get schedule %d: %w", id, err)
	}
	return sc, nil
}

// ScheduleList returns up to limit schedules with ids below before (0:
// from the newest), newest first, and the cursor of the next page (0 on
// the last).
func (s *Store) ScheduleList(ctx context.Context, limit int, before int64) ([]*Schedule, int64, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := s.pool.Query(ctx, q("ScheduleList"), before, limit+1)
	if err != nil {
		return nil, 0, fmt.Errorf("list schedules: %w", interpretError(err))
	}
	defer rows.Close()
	var out []*Schedule
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, 0, fmt.Errorf("list schedules: %w", err)
		}
		out = append(out, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("list schedules: %w", interpretError(err))
	}
	var next int64
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	return out, next, nil
}

// SchedulePause stops a schedule's ticks until ScheduleResume.
func (s *Store) SchedulePause(ctx context.Context, id int64) (*Schedule, error) {
	sc, err := scanSchedule(s.pool.QueryRow(ctx, q("SchedulePause"), id))
	if err != nil {
		return nil, fmt.Errorf("pause schedule %d: %w", id, err)
	}
	return sc, nil
}

// ScheduleResume starts a paused schedule again from its first tick after
// PostgreSQL's now() (next gives it): the ticks of the pause are not
// caught up. Resuming an active schedule changes nothing.
func (s *Store) ScheduleResume(ctx context.Context, id int64, next func(after time.Time) time.Time) (*Schedule, error) {
	var out *Schedule
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var paused bool
		var now time.Time
		if err := tx.QueryRow(ctx, q("ScheduleResumeLock"), id).Scan(&paused, &now); err != nil {
			return err
		}
		var nextAt *time.Time // nil: active already, its next tick stays
		if paused {
			n := next(now)
			nextAt = &n
		}
		var err error
		out, err = scanSchedule(tx.QueryRow(ctx, q("ScheduleResume"), id, nextAt))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("resume schedule %d: %w", id, interpretError(err))
	}
	return out, nil
}

// ScheduleDelete deletes a schedule and returns it as it was. Its jobs
// stay, with schedule_id NULL.
func (s *Store) ScheduleDelete(ctx context.Context, id int64) (*Schedule, error) {
	sc, err := scanSchedule(s.pool.QueryRow(ctx, q("ScheduleDelete"), id))
	if err != nil {
		return nil, fmt.Errorf("delete schedule %d: %w", id, err)
	}
	return sc, nil
}

// ScheduleTrigger enqueues one job from the schedule's template now, paused
// or not. It is not a tick: the schedule's next and last ticks do not move
// and the overlap policy does not apply.
func (s *Store) ScheduleTrigger(ctx context.Context, id int64) (int64, error) {
	var jobID int64
	if err := s.pool.QueryRow(ctx, q("ScheduleTrigger"), id).Scan(&jobID); err != nil {
		return 0, fmt.Errorf("trigger schedule %d: %w", id, interpretError(err))
	}
	return jobID, nil
}

// ScheduleNext is an active schedule as the leader's scheduler looks at it.
type ScheduleNext struct {
	ID         int64
	Cron       string
	TimeZone   string
	Overlap    string
	CatchUp    string
	NextFireAt time.Time
}

// ScheduleListNext returns up to limit active schedules, nearest next tick
// first, and PostgreSQL's now().
func (s *Store) ScheduleListNext(ctx context.Context, limit int) ([]ScheduleNext, time.Time, error) {
	rows, err := s.pool.Query(ctx, q("ScheduleListNext"), limit)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("list next ticks: %w", interpretError(err))
	}
	defer rows.Close()
	var out []ScheduleNext
	var now time.Time
	for rows.Next() {
		var n ScheduleNext
		if err := rows.Scan(&n.ID, &n.Cron, &n.TimeZone, &n.Overlap, &n.CatchUp, &n.NextFireAt, &now); err != nil {
			return nil, time.Time{}, fmt.Errorf("list next ticks: %w", interpretError(err))
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("list next ticks: %w", interpretError(err))
	}
	if len(out) == 0 {
		now = time.Now() // nothing to compare with it
	}
	return out, now, nil
}

// ScheduleFireParams is one look of the leader at a due schedule.
type ScheduleFireParams struct {
	Epoch      int64
	ScheduleID int64
	// Expected is the next tick the leader looked at: if the schedule no
	// longer waits for it (another look, a pause, a delete), nothing
	// happens.
	Expected time.Time
	// Ticks are the ticks to enqueue, oldest first (schedule.Plan).
	Ticks []time.Time
	// Next is the schedule's next tick after this look.
	Next time.Time
}

// ScheduleFireResult is what ScheduleFire did.
type ScheduleFireResult struct {
	// Applied is false when the schedule no longer waited for Expected.
	Applied bool
	// Busy: the skip policy found the last tick's job unfinished, so no
	// tick was enqueued.
	Busy bool
	// JobIDs are the jobs enqueued, one per tick not enqueued before.
	JobIDs []int64
}

// ScheduleFire enqueues a due schedule's ticks and moves its next tick on,
// in one transaction fenced by the leader's epoch (a deposed leader's is
// refused whole: job.ErrDeposed). A tick already enqueued is not enqueued
// again (unique index on (schedule_id, schedule_tick)).
func (s *Store) ScheduleFire(ctx context.Context, p ScheduleFireParams) (ScheduleFireResult, error) {
	var res ScheduleFireResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = ScheduleFireResult{}
		var overlap string
		var busy bool
		err := tx.QueryRow(ctx, q("ScheduleFireLock"), p.ScheduleID, p.Expected, p.Epoch).Scan(&overlap, &busy)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		res.Applied = true
		ticks := p.Ticks
		if busy && overlap == "skip" {
			res.Busy, ticks = true, nil
		}
		var lastTick *time.Time
		var lastJob *int64
		if len(ticks) > 0 {
			rows, err := tx.Query(ctx, q("ScheduleFireInsert"), p.ScheduleID, ticks, p.Epoch)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id int64
				var tick time.Time
				if err := rows.Scan(&id, &tick); err != nil {
					rows.Close()
					return err
				}
				res.JobIDs = append(res.JobIDs, id)
				if lastTick == nil || tick.After(*lastTick) {
					lastTick, lastJob = &tick, &id
				}
			}
			if err := rows.Err(); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, q("ScheduleFireAdvance"), p.ScheduleID, p.Next, lastTick, lastJob, p.Epoch)
		return err
	})
	if err != nil {
		return ScheduleFireResult{}, fmt.Errorf("fire schedule %d: %w", p.ScheduleID, interpretError(err))
	}
	return res, nil
}
