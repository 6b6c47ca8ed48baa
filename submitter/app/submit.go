package app

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the submission path every route that creates jobs
// takes: the admission check and the insert.

// Admit refuses a submission while the due jobs are at Config.MaxBacklog
// (backlogGuard) with 503 backlog_full; the front end adds Retry-After.
// Call it after validation, so bad input still gets its 4xx, and before
// any write.
func (a *App) Admit() error {
	if a.backlog.admit() {
		return nil
	}
	a.metrics.backlogFull.Inc()
	return httpx.Errorf(http.StatusServiceUnavailable, wire.CodeBacklogFull,
		"%d or more jobs are waiting for a worker (max_backlog); retry later", a.cfg.MaxBacklog)
}

// dueNow counts the jobs just created that are due at once (not delayed
// or scheduled for later): those join the backlog that Admit bounds.
func dueNow(params []store.JobInsertParams, res []store.JobInsertResult) int {
	now, n := time.Now(), 0
	for i, r := range res {
		p := params[i]
		if r.Created && r.State == job.StatePending && p.Delay <= 0 && (p.RunAt == nil || !p.RunAt.After(now)) {
			n++
		}
	}
	return n
}

// Insert creates the jobs in one statement, answers each with its id and
// state (an earlier job's for a matching idempotency key), and wakes the
// coordinator if anything was created; it returns how many it created. A
// single job shares its statement with concurrent submissions
// (insertBatcher).
func (a *App) Insert(ctx context.Context, params []JobInsertParams) ([]wire.SubmitResponse, int, error) {
	mark := a.backlog.mark()
	var res []store.JobInsertResult
	var err error
	ictx, end := traceInsert(ctx, params)
	if len(params) == 1 && len(params[0].DependsOn) == 0 {
		var r store.JobInsertResult
		r, err = a.inserts.Insert(ictx, params[0])
		res = []store.JobInsertResult{r}
	} else {
		res, err = a.store.JobInsert(ictx, params)
	}
	end(err)
	var unknown *store.UnknownJobsError
	if errors.As(err, &unknown) {
		ids := make([]string, len(unknown.IDs))
		for i, id := range unknown.IDs {
			ids[i] = formatID(id)
		}
		return nil, 0, httpx.Errorf(http.StatusBadRequest, wire.CodeUnknownDependency,
			"depends_on: no job with id %s", strings.Join(ids, ", "))
	}
	if err != nil {
		return nil, 0, a.storeError(storeOpInsert, err)
	}
	out := make([]wire.SubmitResponse, len(res))
	var existing []int64
	created, limited, names := 0, false, []string{}
	debug := a.logger.Enabled(ctx, slog.LevelDebug)
	for i, r := range res {
		out[i] = wire.SubmitResponse{JobID: formatID(r.ID), Status: string(cmp.Or(r.State, job.StatePending))}
		if r.Created {
			created++
			limited = limited || r.Limited
			if names != nil && !slices.Contains(names, params[i].Name) {
				names = append(names, params[i].Name)
				if len(names) > wire.MaxWakeNames {
					names = nil // any name
				}
			}
		} else {
			existing = append(existing, r.ID)
		}
		if debug {
			a.logger.DebugContext(ctx, "job submitted", "job_id", r.ID, "name", params[i].Name, "created", r.Created)
		}
	}
	a.metrics.submitted.Add(float64(created))
	a.backlog.accepted(dueNow(params, res), mark)
	a.metrics.deduplicated.Add(float64(len(existing)))
	if created > 0 {
		slices.Sort(names)
		a.wakeSubmitted(wire.Wake{Limited: limited, Names: names})
	}
	if len(existing) == 0 {
		return out, created, nil
	}
	states, err := a.store.JobStateGetMany(ctx, existing)
	if err != nil {
		return nil, 0, a.storeError(storeOpStateGet, err)
	}
	for i, r := range res {
		if r.Created {
			continue
		}
		st, ok := states[r.ID]
		if !ok { // removed by retention since the insert
			return nil, 0, httpx.Errorf(http.StatusConflict, wire.CodeConflict,
				"the earlier job with this idempotency or unique key (%d) was just deleted; retry", r.ID)
		}
		out[i].Status = string(st)
	}
	return out, created, nil
}
