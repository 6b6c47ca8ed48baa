package coordinator

import (
	"context"

	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/store"
)

// storeLogs stores the lines the results of one batch carry (their
// handlers' logs, docs/protocol.md "Logs"), in one transaction, before the
// batch's outcomes: the store keeps only the lines of leases the jobs
// still hold, and an outcome ends its lease. A stale or superseded
// lease's lines are so dropped like its result. A batch without lines
// costs nothing here. Lines are bounded already (queue.DecodeResult); if
// PostgreSQL still refuses them, they are dropped and the outcomes
// applied: logs never hold results up.
func (a *resultApplier) storeLogs(ctx context.Context, rs []queue.ReceivedResult) error {
	var ls []store.LogAppend
	for i := range rs {
		r := &rs[i].Result
		if r.Logs == nil || len(r.Logs.Lines) == 0 {
			continue
		}
		ls = append(ls, store.LogAppend{ID: r.JobID, LeaseToken: r.LeaseToken, WorkerID: r.WorkerID,
			Lines: r.Logs.Lines, Dropped: r.Logs.Dropped})
	}
	if len(ls) == 0 {
		return nil
	}
	_, err := persist(ctx, a, func() (struct{}, error) { return struct{}{}, a.store.JobLogAppend(ctx, a.l.epoch, ls) })
	if poison(err) {
		a.metrics.badMessages.WithLabelValues("results").Inc()
		a.log.ErrorContext(ctx, "dropping log lines postgres refuses", "results", len(ls), "error", err)
		return nil
	}
	return err
}
