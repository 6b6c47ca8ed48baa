package coordinator

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// statementRecorder is the real store, recording each claim statement the
// dispatcher makes: how many groups it claimed for ("1" for the one-group
// claims).
type statementRecorder struct {
	*store.Store
	mu     sync.Mutex
	groups []int
}

func (s *statementRecorder) JobClaimBatch(ctx context.Context, p store.JobClaimParams) ([]store.Claimed, error) {
	s.record(1)
	return s.Store.JobClaimBatch(ctx, p)
}

func (s *statementRecorder) JobClaimGroups(ctx context.Context, p store.JobClaimGroupsParams) ([]store.Claimed, error) {
	s.record(len(p.Groups))
	return s.Store.JobClaimGroups(ctx, p)
}

func (s *statementRecorder) record(groups int) {
	s.mu.Lock()
	s.groups = append(s.groups, groups)
	s.mu.Unlock()
}

func (s *statementRecorder) take() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.groups
	s.groups = nil
	return out
}

// groupFleet registers n workers of 2 slots, each with two job names of
// its own (tNN and tNNb), and inserts three due jobs for each.
func groupFleet(r *rig, n int) {
	r.t.Helper()
	for g := range n {
		name := fmt.Sprintf("t%02d", g)
		r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "w" + name, JobTypes: []string{name, name + "b"}, Concurrency: 2}, time.Now())
		if _, err := r.store.JobInsert(r.ctx, []store.JobInsertParams{{Name: name}, {Name: name + "b"}, {Name: name}}); err != nil {
			r.t.Fatal(err)
		}
	}
}

// TestDispatchGroupsShareOneClaim: a fleet of 20 worker groups, each with
// job names of its own, is claimed for in one statement per round, and
// each job goes to a worker of its group.
func TestDispatchGroupsShareOneClaim(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rec := &statementRecorder{Store: r.store}
	d := &dispatcher{base: r.b, store: rec, queue: r.queue}
	groupFleet(r, 20)
	if _, err := d.roundDelivered(r.ctx, scopeAll); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 1 || got[0] != 20 {
		t.Fatalf("a round for 20 groups made claims for %v groups; want one statement for all 20", got)
	}
	if n := r.count(`SELECT count(*) FROM jobs WHERE status = 'leased'`); n != 40 {
		t.Errorf("%d jobs leased, want 40 (2 slots in each of 20 groups)", n)
	}
	if n := r.count(`SELECT count(*) FROM jobs WHERE status = 'leased' AND worker_id <> 'w' || rtrim(name, 'b')`); n != 0 {
		t.Errorf("%d jobs leased to a worker of another group", n)
	}
}

// TestDispatchGroupClaimWithinClaimBatch: one statement claims for at most
// CLAIM_BATCH slots, so with a batch of 5 and 2 free slots a group, each
// statement of the round claims for 2 groups.
func TestDispatchGroupClaimWithinClaimBatch(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rec := &statementRecorder{Store: r.store}
	d := &dispatcher{base: r.b, store: rec, queue: r.queue}
	d.cfg.ClaimBatch = 5
	groupFleet(r, 20)
	if _, err := d.roundDelivered(r.ctx, scopeAll); err != nil {
		t.Fatal(err)
	}
	got := rec.take()
	if len(got) != 10 {
		t.Fatalf("claims for %v groups; want 10 statements of 2", got)
	}
	for _, n := range got {
		if n != 2 {
			t.Fatalf("claims for %v groups; want 10 statements of 2", got)
		}
	}
	if n := r.count(`SELECT count(*) FROM jobs WHERE status = 'leased'`); n != 40 {
		t.Errorf("%d jobs leased, want 40", n)
	}
}

// TestDispatchOverlappingGroupsClaimApart: groups that share a job name,
// and a group of any name, are claimed for by a statement each (one
// statement could lock a job twice), and each job still goes to a worker
// that handles it.
func TestDispatchOverlappingGroupsClaimApart(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rec := &statementRecorder{Store: r.store}
	d := &dispatcher{base: r.b, store: rec, queue: r.queue}
	for _, hb := range []wire.Heartbeat{
		{WorkerID: "wa", JobTypes: []string{"a"}, Concurrency: 2},
		{WorkerID: "wab", JobTypes: []string{"a", "b"}, Concurrency: 2},
		{WorkerID: "wany", JobTypes: []string{"*"}, Concurrency: 2},
	} {
		r.b.l.workers.Heartbeat(hb, time.Now())
	}
	ps := []store.JobInsertParams{{Name: "a"}, {Name: "a"}, {Name: "b"}, {Name: "b"}, {Name: "c"}, {Name: "c"}}
	if _, err := r.store.JobInsert(r.ctx, ps); err != nil {
		t.Fatal(err)
	}
	if _, err := d.roundDelivered(r.ctx, scopeAll); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 3 || got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Errorf("claims for %v groups; want three statements of one group", got)
	}
	wrong := r.count(`SELECT count(*) FROM jobs WHERE status = 'leased' AND NOT (worker_id = 'wany'
		OR (worker_id = 'wab' AND name IN ('a', 'b')) OR (worker_id = 'wa' AND name = 'a'))`)
	if n := r.count(`SELECT count(*) FROM jobs WHERE status = 'leased'`); n != 6 || wrong != 0 {
		t.Errorf("%d jobs leased (want 6), %d to a worker that does not handle them", n, wrong)
	}
}
