package coordinator

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
)

// TestStuckResultsOutliveTheirLeases: a fault that keeps the applier from
// writing for longer than the leases of the results it holds does not let
// the reaper end those leases as timed out (their worker sent the results
// and names the jobs no more): the reaper judges nobody until the results
// are written, and every job completes.
func TestStuckResultsOutliveTheirLeases(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	results := []string{`1`, `{"b": 2}`, `"c"`}
	cs, holder, release := r.resultsHeldPastTheirLeases(results)
	// The first wait: the applier holds the results and cannot write them.
	seen := map[wait]bool{}
	w := r.nextWait(holder, seen)
	seen[w] = true
	r.start(r.reaper())
	// Cancel its tries for about a second (its backoff grows 50, 100, 200,
	// 400 ms...), while the reaper scans for leases that ran out every
	// 200 ms.
	for len(seen) < 6 {
		if _, err := r.db.Exec(r.ctx, `SELECT pg_cancel_backend($1)`, w.pid); err != nil {
			t.Fatal(err)
		}
		w = r.nextWait(holder, seen)
		seen[w] = true
	}
	release()
	r.appliedAsSent(cs, results)
}

// resultsHeldPastTheirLeases leases three jobs to a live worker "w" that
// names none of them, makes their leases run out, and has the worker send
// results (one per job) that a started result applier reads but cannot
// write: the second job's row is locked by holder until release.
func (r *rig) resultsHeldPastTheirLeases(results []string) (cs []store.Claimed, holder int32, release func()) {
	r.t.Helper()
	cs = r.insertLeased(len(results), "w")
	r.beat("w", nil) // alive, running nothing: its results are sent
	r.start(r.heartbeatReader())
	r.caughtUp()
	if _, err := r.db.Exec(r.ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second'`); err != nil {
		r.t.Fatal(err)
	}
	holder, release = r.lockRow(cs[1].ID)
	r.sendCompleted(cs, results)
	r.start(r.results())
	return cs, holder, release
}

// cancelFirstWrite is the reaper's store with one fault: the first time
// the reaper scans for leases that ran out, the result applier's write
// blocked by holder fails (the test cancels it) before the scan runs, so
// that the scan meets the moment a held result's write has just failed.
type cancelFirstWrite struct {
	reaperStore
	r      *rig
	holder int32
	done   bool
}

func (c *cancelFirstWrite) JobReclaimExpired(ctx context.Context, epoch int64, spare []string, policy store.RetryPolicy) ([]store.FailOutcome, error) {
	if !c.done {
		c.done = true
		var pid int32
		err := c.r.db.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, c.holder).Scan(&pid)
		if err == nil {
			if _, err := c.r.db.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid); err != nil {
				return nil, err
			}
			for !c.r.b.l.resultsStuck.Load() && ctx.Err() == nil {
				runtime.Gosched()
			}
		}
	}
	return c.reaperStore.JobReclaimExpired(ctx, epoch, spare, policy)
}

// TestReaperEndsNoLeaseWhoseResultIsInHand: the reaper must not end a
// lease whose result the applier has read and is writing, even when the
// write fails just after the reaper looked. (The reaper used to check a
// flag the first failed write sets, and then scan; a write failing in
// between let the scan reclaim the jobs the write had locked.)
func TestReaperEndsNoLeaseWhoseResultIsInHand(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	results := []string{`1`, `2`, `3`}
	cs, holder, release := r.resultsHeldPastTheirLeases(results)
	r.nextWait(holder, map[wait]bool{}) // the applier holds the results, blocked
	rp := r.reaper()
	rp.store = &cancelFirstWrite{reaperStore: rp.store, r: r, holder: holder}
	r.start(rp)
	testwait.For(t, 10*time.Second, "the reaper to skip a round", func() bool {
		return testutil.ToFloat64(r.b.metrics.reaperSkipped) >= 3
	})
	release()
	r.appliedAsSent(cs, results)
}
