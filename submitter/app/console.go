package app

import (
	"context"
	"time"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/ui"
)

// Console returns the App as the console asks for it (ui.Service).
func (a *App) Console() ui.Service { return consoleService{a} }

// consoleService is the App as the console asks for it (ui.Service):
// the same calls, in the console's own types, which this converts from and
// to the store's, so that the console never imports the store.
type consoleService struct{ *App }

func listParams(p ui.ListParams) store.JobListParams {
	return store.JobListParams{State: p.State, Name: p.Name, Queue: p.Queue, Fingerprint: p.Fingerprint,
		Before: p.Before, Limit: p.Limit}
}

// JobList lists jobs (GET /jobs).
func (c consoleService) JobList(ctx context.Context, p ui.ListParams) (wire.JobListResponse, error) {
	return c.App.JobList(ctx, listParams(p))
}

// JobSearch searches the jobs p selects for those that pass scan.
func (c consoleService) JobSearch(ctx context.Context, p ui.ListParams, scan ui.Scan) (wire.JobListResponse, bool, error) {
	return c.App.JobSearch(ctx, listParams(p), store.JobScan(scan))
}

// Rollup returns the per-minute rows from since on.
func (c consoleService) Rollup(ctx context.Context, since time.Time) ([]ui.RollupRow, error) {
	rows, err := c.App.Rollup(ctx, since)
	out := make([]ui.RollupRow, len(rows))
	for i, r := range rows {
		out[i] = ui.RollupRow(r)
	}
	return out, err
}

// DeadList returns a page of the DLQ, every queue's (the Dead letters
// page has no queue filter: a queue's dead jobs are the Jobs page's
// "queue:Q state:failed", which the Queues page links to).
func (c consoleService) DeadList(ctx context.Context, limit int, cursor string) (wire.DLQResponse, error) {
	return c.App.DeadList(ctx, "", limit, cursor)
}

// DeadGroups returns the largest groups of dead jobs.
func (c consoleService) DeadGroups(ctx context.Context, limit int) (ui.DeadGroups, error) {
	g, err := c.App.DeadGroups(ctx, limit)
	out := ui.DeadGroups{Total: g.Total, Dead: g.Dead, Groups: make([]ui.DeadGroup, len(g.Groups))}
	for i, d := range g.Groups {
		out.Groups[i] = ui.DeadGroup(d)
	}
	return out, err
}

// JobLogs returns a job's first limit log lines (GET /jobs/{id}/logs).
func (c consoleService) JobLogs(ctx context.Context, id int64, limit int64) (wire.JobLogs, error) {
	return c.App.JobLogs(ctx, JobLogsQuery{ID: id, Limit: limit})
}
