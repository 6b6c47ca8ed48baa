package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// TestClaimBoundedByBytes: a group's claim holds about ClaimBytes of
// payloads, whatever CLAIM_BATCH and the free slots allow. Large payloads
// claimed a thousand at a time made one round move a gigabyte through
// PostgreSQL, the leader and one Redis command, which stalled Redis long
// enough for the workers' heartbeats to time out and their leases to be
// reclaimed, round after round.
func TestClaimBoundedByBytes(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.b.cfg.ClaimBytes = 1 << 20
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "w", JobTypes: []string{"*"}, Concurrency: 500}, time.Now())
	payload := json.RawMessage(`"` + strings.Repeat("x", 64<<10-2) + `"`) // 64 KiB
	ps := make([]store.JobInsertParams, 200)
	for i := range ps {
		ps[i] = store.JobInsertParams{Name: "big", Payload: payload}
	}
	if _, err := r.store.JobInsert(r.ctx, ps); err != nil {
		t.Fatal(err)
	}
	d := &dispatcher{base: r.b, store: r.store, queue: r.queue}
	leased := 0
	for round := 1; leased < len(ps); round++ {
		if round > 40 {
			t.Fatalf("%d of %d jobs leased after 40 rounds", leased, len(ps))
		}
		if _, err := d.roundDelivered(r.ctx, scopeAll); err != nil {
			t.Fatal(err)
		}
		var now int
		if err := r.db.QueryRow(r.ctx, `SELECT count(*) FROM jobs WHERE status = 'leased'`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		// The first claim has no figure of the group's job size yet and
		// takes the few slots a first round offers (minClaimSize).
		if round > 1 && now-leased > 17 {
			t.Fatalf("round %d leased %d jobs of 64 KiB, want at most 17 (1 MiB and one job)", round, now-leased)
		}
		leased = now
	}
	n, err := r.rdb.LLen(r.ctx, r.keys.WorkerJobs("w")).Result()
	if err != nil || n != int64(len(ps)) {
		t.Errorf("worker's list holds %d deliveries (%v), want %d", n, err, len(ps))
	}
}
