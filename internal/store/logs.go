package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

// LogAppend is the lines one result carries, for the lease that sent it.
type LogAppend struct {
	ID         int64
	LeaseToken int64
	WorkerID   string
	Lines      []wire.LogLine
	Dropped    int64 // lines the worker dropped before these
}

// JobLogAppend stores the lines of results whose lease the job still holds
// (the token and the worker match, under the current epoch; the others'
// are not stored), under the job's current attempt, then trims each job
// it touched to wire.MaxAttemptLogBytes an attempt and wire.MaxJobLogBytes
// in all, oldest lines first, counting what it drops. Lines must be
// bounded already (wire.Logs.Bound); NULs and invalid UTF-8 are made
// storable here all the same. One transaction, two statements, one round
// trip.
func (s *Store) JobLogAppend(ctx context.Context, epoch int64, ls []LogAppend) error {
	var (
		ids, tokens, dropped []int64
		workers              []string
		ats                  []time.Time
		levels, msgs         []string
		jobs                 []int64
	)
	seen := map[int64]bool{}
	for _, l := range ls {
		if len(l.Lines) == 0 {
			continue // a drop count comes with the lines after it
		}
		if !seen[l.ID] {
			seen[l.ID] = true
			jobs = append(jobs, l.ID)
		}
		for i, ln := range l.Lines {
			at := ln.Time
			if at.IsZero() {
				at = time.Now()
			}
			var drop int64
			if i == 0 {
				drop = max(l.Dropped, 0) // counted once, on the result's first line
			}
			ids, tokens, workers, dropped = append(ids, l.ID), append(tokens, l.LeaseToken), append(workers, l.WorkerID), append(dropped, drop)
			ats = append(ats, at)
			levels, msgs = append(levels, storableText(ln.Level, wire.MaxLogLevelLen)), append(msgs, storableText(ln.Message, wire.MaxLogLineBytes))
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(q("JobLogAppendLines"), ids, tokens, workers, ats, levels, msgs, dropped, leased, epoch)
		b.Queue(q("JobLogAppendTrim"), jobs, wire.MaxAttemptLogBytes, wire.MaxJobLogBytes, wire.LogLineOverhead)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("store job logs: %w", interpretError(err))
	}
	return nil
}

// JobLogsQuery selects a job's lines.
type JobLogsQuery struct {
	ID      int64
	Attempt int   // 0: every attempt
	After   int64 // only lines with a greater seq
	Limit   int   // at most this many lines
}

// JobLogLine is one stored line.
type JobLogLine struct {
	Seq     int64
	Attempt int
	At      time.Time
	Level   string
	Message string
}

// JobLogDrop is how many lines of one attempt were dropped.
type JobLogDrop struct {
	Attempt int
	Dropped int64
}

// JobLogsGet returns a job's lines after q.After, oldest first, at most
// q.Limit, and the dropped counts of its attempts (of q.Attempt's alone
// when it is set); job.ErrNotFound if there is no such job. One round
// trip.
func (s *Store) JobLogsGet(ctx context.Context, jq JobLogsQuery) ([]JobLogLine, []JobLogDrop, error) {
	b := &pgx.Batch{}
	b.Queue(q("JobLogsGetJob"), jq.ID)
	b.Queue(q("JobLogsGetLines"), jq.ID, jq.After, jq.Attempt, jq.Limit)
	b.Queue(q("JobLogsGetDrops"), jq.ID, jq.Attempt)
	br := s.pool.SendBatch(ctx, b)
	lines, drops, err := readJobLogs(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = interpretError(cerr)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get logs of job %d: %w", jq.ID, err)
	}
	return lines, drops, nil
}

func readJobLogs(br pgx.BatchResults) ([]JobLogLine, []JobLogDrop, error) {
	var one int
	if err := br.QueryRow().Scan(&one); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil, job.ErrNotFound
		}
		return nil, nil, interpretError(err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, interpretError(err)
	}
	lines, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobLogLine, error) {
		var l JobLogLine
		return l, r.Scan(&l.Seq, &l.Attempt, &l.At, &l.Level, &l.Message)
	})
	if err != nil {
		return nil, nil, interpretError(err)
	}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, interpretError(err)
	}
	drops, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobLogDrop, error) {
		var d JobLogDrop
		return d, r.Scan(&d.Attempt, &d.Dropped)
	})
	if err != nil {
		return nil, nil, interpretError(err)
	}
	return lines, drops, nil
}
