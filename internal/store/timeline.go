package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// Bounds of what a timeline reads besides the row: the latest events and
// operator actions.
const (
	MaxTimelineEvents = 200
	MaxTimelineAudit  = 100
)

// JobTimelineGet returns a job (job.ErrNotFound if there is none) and the
// events its row does not keep: its latest MaxTimelineEvents job_events
// (stale results, hand-backs, bulk requeues) and its latest MaxTimelineAudit operator
// actions from the audit log (job.EventOperator, with the actor), in no
// particular order. One round trip; job.BuildTimeline assembles them.
func (s *Store) JobTimelineGet(ctx context.Context, id int64) (*job.Job, []job.Event, error) {
	b := &pgx.Batch{}
	b.Queue(q("JobTimelineGetJob"), id)
	b.Queue(q("JobTimelineGetEvents"), id, MaxTimelineEvents)
	b.Queue(q("JobTimelineGetAudit"), strconv.FormatInt(id, 10), MaxTimelineAudit)
	br := s.pool.SendBatch(ctx, b)
	j, evs, err := readTimeline(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = interpretError(cerr)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get timeline of job %d: %w", id, err)
	}
	return j, evs, nil
}

func readTimeline(br pgx.BatchResults) (*job.Job, []job.Event, error) {
	j, err := scanJob(br.QueryRow())
	if err != nil {
		return nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, interpretError(err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (job.Event, error) {
		var e job.Event
		var at time.Time
		var kind string
		var detail []byte
		if err := r.Scan(&at, &kind, &detail); err != nil {
			return e, err
		}
		if err := json.Unmarshal(detail, &e); err != nil {
			return e, fmt.Errorf("decode a %s event: %w", kind, err)
		}
		if kind == job.EventOperator { // a bulk requeue's (requeueEvents): job.Event keeps these out of its JSON
			var op struct{ Action, Actor, Result string }
			if err := json.Unmarshal(detail, &op); err != nil {
				return e, fmt.Errorf("decode a %s event: %w", kind, err)
			}
			e.Action, e.Actor, e.Result = op.Action, op.Actor, op.Result
		}
		e.At, e.Kind = at, kind
		return e, nil
	})
	if err != nil {
		return nil, nil, interpretError(err)
	}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, interpretError(err)
	}
	ops, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (job.Event, error) {
		e := job.Event{Kind: job.EventOperator}
		return e, r.Scan(&e.At, &e.Action, &e.Actor, &e.Result)
	})
	if err != nil {
		return nil, nil, interpretError(err)
	}
	return j, append(evs, ops...), nil
}
