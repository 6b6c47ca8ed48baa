package coordinator

import (
	"slices"
	"testing"
	"time"

	"github.com/dtsched/dts/coordinator/internal/registry"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// TestStoppedWorkersResultsWinOverTheRelease: a worker completes a job,
// sends its result, then its stopped heartbeat, while the result applier
// lags (here: not running yet, as behind a backlog or a paused leader). The
// reaper neither releases the job's lease nor reclaims it when it runs out
// before the results the worker sent before it stopped are applied,
// however long past the stop grace and the lease's end: the job completes
// once, in its first attempt, and is not run again. Once they are applied,
// the reaper releases what the worker left and forgets it.
func TestStoppedWorkersResultsWinOverTheRelease(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(2, "w")
	r.start(r.heartbeatReader())
	stopBeat := r.beat("w", cs)
	r.caughtUp()

	// Job 0 completes; job 1 was delivered after the worker stopped
	// reading its list: it is the one to release.
	r.sendResults(completed(cs[0], `"done"`))
	stopBeat()
	if err := r.queue.SendHeartbeat(r.ctx, wire.Heartbeat{WorkerID: "w", JobTypes: []string{"*"}, Concurrency: 8, Stopped: true}); err != nil {
		t.Fatal(err)
	}
	var stoppedAt time.Time
	testwait.For(t, 10*time.Second, "the stopped heartbeat read", func() bool {
		i := slices.IndexFunc(r.b.l.workers.Snapshot(), func(w registry.Worker) bool { return w.ID == "w" })
		if i < 0 {
			return false
		}
		stoppedAt = r.b.l.workers.Snapshot()[i].StoppedAt
		return !stoppedAt.IsZero()
	})
	rp := r.reaper()
	testwait.For(t, 10*time.Second, "the leases run out", func() bool {
		var n int
		if err := r.db.QueryRow(r.ctx, `SELECT count(*) FROM jobs WHERE lease_expires_at < now()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == len(cs)
	})
	testwait.For(t, 10*time.Second, "a horizon past the stop grace", func() bool {
		h, ok := r.b.l.live.fresh(r.clock.now(), rp.maxHeartbeatLag())
		return ok && h.After(stoppedAt.Add(rp.stopGrace()))
	})
	rp.tick(r.ctx)
	rp.tick(r.ctx)
	if st := r.states(cs); st[cs[0].ID] != "leased" || st[cs[1].ID] != "leased" {
		t.Fatalf("past the stop grace and the leases' end, with the worker's result unapplied: %v; want both still leased", st)
	}

	r.start(r.results())
	testwait.For(t, 10*time.Second, "the result applied", func() bool { return r.states(cs)[cs[0].ID] != "leased" })
	var status string
	var attempts int
	if err := r.db.QueryRow(r.ctx, `SELECT status, attempts FROM jobs WHERE id = $1`, cs[0].ID).Scan(&status, &attempts); err != nil {
		t.Fatal(err)
	}
	if status != "completed" || attempts != 1 {
		t.Errorf("completed job: %s after %d attempts; want completed after 1", status, attempts)
	}
	testwait.For(t, 10*time.Second, "the leftover lease released", func() bool {
		rp.tick(r.ctx)
		return r.states(cs)[cs[1].ID] == "pending"
	})
	if slices.ContainsFunc(r.b.l.workers.Snapshot(), func(w registry.Worker) bool { return w.ID == "w" }) {
		t.Error("the stopped worker is still in the registry after its release")
	}
}
