package registry

import (
	"testing"
	"time"
)

// A worker a new leader knows only from its leases has told it no job
// names yet: it gets no slot until it heartbeats, even once one of those
// leases is done. A slot with no names claims any job (dts_claim_jobs
// reads no names as every name), which the worker has no handler for and
// fails for good (found by e2e.TestChaosHosts: a leader partitioned from
// PostgreSQL, its successor applying a lease-only worker's result before
// the worker's first heartbeat).
func TestLeaseOnlyWorkerGetsNoSlotUntilItHeartbeats(t *testing.T) {
	r := New(3 * time.Second)
	now := time.Now()
	r.Assigned("w-custom", 1, 11, now)
	r.Assigned("w-custom", 2, 12, now)
	r.Touch("w-custom", time.Time{})
	r.Done(1, 11)
	if got := r.Slots(10); len(got) != 0 {
		t.Fatalf("Slots = %+v for a worker known only from its leases, want none", got)
	}
}
