package coordinator

import "testing"

// TestStuckResultsOutliveTheirLeases: a fault that keeps the applier from
// writing for longer than the leases of the results it holds does not let
// the reaper end those leases as timed out (their worker sent the results
// and names the jobs no more): the reaper judges nobody until the results
// are written, and every job completes.
func TestStuckResultsOutliveTheirLeases(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(3, "w")
	results := []string{`1`, `{"b": 2}`, `"c"`}
	r.beat("w", nil) // alive, running nothing: its results are sent
	r.start(r.heartbeatReader())
	r.caughtUp()
	if _, err := r.db.Exec(r.ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	holder, release := r.lockRow(cs[1].ID)
	r.sendCompleted(cs, results)
	r.start(r.results())
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
