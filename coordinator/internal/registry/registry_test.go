package registry

import (
	"reflect"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/wire"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func hb(id string, conc int, types ...string) wire.Heartbeat {
	if len(types) == 0 {
		types = []string{"*"}
	}
	return wire.Heartbeat{WorkerID: id, Concurrency: conc, JobTypes: types}
}

func TestSlotsLeastRecentlyAssignedFirst(t *testing.T) {
	t.Parallel()
	r := New(3 * time.Second)
	for _, id := range []string{"a", "b", "c"} {
		r.Heartbeat(hb(id, 1), t0)
	}
	// a then c were assigned (and finished); b never was: b is LRU, then a, then c.
	r.Assigned("a", 1, 1, t0)
	r.Done(1, 1)
	r.Assigned("c", 2, 2, t0)
	r.Done(2, 2)
	got := r.Slots(10)
	want := []SlotGroup{{Slots: []string{"b", "a", "c"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Slots = %+v, want %+v", got, want)
	}
	// One job goes to b; the next single job must go to a, then c, then b.
	var order []string
	for i := int64(10); i < 14; i++ {
		g := r.Slots(1)
		w := g[0].Slots[0]
		order = append(order, w)
		r.Assigned(w, i, i, t0)
		r.Done(i, i)
	}
	if want := []string{"b", "a", "c", "b"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("assignment order = %v, want %v (true LRU)", order, want)
	}
}

func TestSlotsRoundRobinOverFreeSlots(t *testing.T) {
	t.Parallel()
	r := New(3 * time.Second)
	r.Heartbeat(hb("a", 3), t0)
	r.Heartbeat(hb("b", 1), t0)
	r.Heartbeat(hb("c", 2), t0)
	r.Assigned("c", 1, 1, t0) // c: 1 of 2 used, most recent
	got := r.Slots(100)
	want := []SlotGroup{{Slots: []string{"a", "b", "c", "a", "a"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Slots = %+v, want %+v", got, want)
	}
	if got := r.Slots(2); !reflect.DeepEqual(got[0].Slots, []string{"a", "b"}) {
		t.Fatalf("Slots(2) = %+v, want a, b", got)
	}
}

func TestSlotsSkipBusyDrainingAndGone(t *testing.T) {
	t.Parallel()
	r := New(3 * time.Second)
	r.Heartbeat(hb("busy", 1), t0)
	r.Assigned("busy", 1, 1, t0)
	d := hb("draining", 4)
	d.Draining = true
	r.Heartbeat(d, t0)
	r.Heartbeat(hb("old", 4), t0.Add(-10*time.Second))
	r.Assigned("old", 7, 70, t0.Add(-10*time.Second))
	r.Heartbeat(hb("ok", 1), t0)
	if gone := r.Expire(t0); !reflect.DeepEqual(gone, []Expired{{ID: "old", Leases: []Lease{{JobID: 7, Token: 70}}}}) {
		t.Fatalf("Expire = %v, want [old] with its lease of job 7", gone)
	}
	// It comes back under the same id and gets a new lease: the leases
	// named at its expiry do not grow.
	r.Heartbeat(hb("old", 4), t0)
	r.Assigned("old", 8, 80, t0)
	if got := r.Leases("old"); len(got) != 2 {
		t.Fatalf("Leases(old) = %v, want jobs 7 and 8", got)
	}
	r.Done(7, 70)
	r.Heartbeat(hb("old", 4), t0.Add(-10*time.Second)) // silent again
	if gone := r.Expire(t0); !reflect.DeepEqual(gone, []Expired{{ID: "old", Leases: []Lease{{JobID: 8, Token: 80}}}}) {
		t.Fatalf("Expire = %v, want [old] with its lease of job 8", gone)
	}
	if gone := r.Expire(t0); len(gone) != 0 {
		t.Fatalf("second Expire = %v, want none (already unavailable)", gone)
	}
	got := r.Slots(100)
	if want := []SlotGroup{{Slots: []string{"ok"}}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Slots = %+v, want %+v", got, want)
	}
	states := map[string]string{}
	for _, w := range r.Snapshot() {
		states[w.ID] = w.State()
	}
	want := map[string]string{"busy": StateBusy, "draining": StateDraining, "old": StateUnavailable, "ok": StateAvailable}
	if !reflect.DeepEqual(states, want) {
		t.Fatalf("states = %v, want %v", states, want)
	}
	// A heartbeat brings the unavailable worker back.
	if !r.Heartbeat(hb("old", 4), t0) {
		t.Fatal("Heartbeat of an unavailable worker should report it rejoined")
	}
}

func TestSlotsGroupByJobTypes(t *testing.T) {
	t.Parallel()
	r := New(3 * time.Second)
	r.Heartbeat(hb("any", 1), t0)
	r.Heartbeat(hb("mail1", 1, "email", "sms"), t0)
	r.Heartbeat(hb("mail2", 1, "sms", "email"), t0)
	got := r.Slots(10)
	want := []SlotGroup{
		{Types: []string{"email", "sms"}, Slots: []string{"mail1", "mail2"}},
		{Slots: []string{"any"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Slots = %+v, want %+v", got, want)
	}
}

// Workers that serve different queues, or the same queues with other
// weights, are different groups; the catch-all types still claim last.
func TestSlotsGroupByQueues(t *testing.T) {
	t.Parallel()
	r := New(3 * time.Second)
	weighted := []wire.QueueWeight{{Name: "critical", Weight: 6}, {Name: "low", Weight: 1}}
	with := func(h wire.Heartbeat, qs []wire.QueueWeight) wire.Heartbeat { h.Queues = qs; return h }
	r.Heartbeat(hb("all", 1), t0)
	r.Heartbeat(with(hb("w1", 1), weighted), t0)
	r.Heartbeat(with(hb("w2", 1), weighted), t0)
	r.Heartbeat(with(hb("w3", 1), []wire.QueueWeight{{Name: "critical", Weight: 1}, {Name: "low", Weight: 1}}), t0)
	r.Heartbeat(with(hb("mail", 1, "email"), weighted), t0)
	got := r.Slots(10)
	want := []SlotGroup{
		{Types: []string{"email"}, Queues: weighted, Slots: []string{"mail"}},
		{Slots: []string{"all"}},
		{Queues: []wire.QueueWeight{{Name: "critical", Weight: 1}, {Name: "low", Weight: 1}}, Slots: []string{"w3"}},
		{Queues: weighted, Slots: []string{"w1", "w2"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Slots = %+v, want %+v", got, want)
	}
}

// A heartbeat's queue list is input: bad entries are dropped, and a list
// left empty means every queue.
func TestHeartbeatQueuesChecked(t *testing.T) {
	t.Parallel()
	r := New(3 * time.Second)
	h := hb("w", 1)
	h.Queues = []wire.QueueWeight{{Name: "ok", Weight: 2}, {Name: "bad name", Weight: 1}, {Name: "neg", Weight: -1},
		{Name: "big", Weight: wire.MaxQueueWeight + 1}, {Name: "ok", Weight: 5}, {Name: "zero", Weight: 0}}
	r.Heartbeat(h, t0)
	if got := r.Snapshot()[0].Queues; !reflect.DeepEqual(got, []wire.QueueWeight{{Name: "ok", Weight: 2}, {Name: "zero", Weight: 0}}) {
		t.Fatalf("queues = %+v", got)
	}
	h.Queues = []wire.QueueWeight{{Name: "", Weight: 1}}
	r.Heartbeat(h, t0)
	if got := r.Snapshot()[0].Queues; got != nil {
		t.Fatalf("queues of an all-bad list = %+v; want nil (every queue)", got)
	}
}

func TestDoneNeedsMatchingToken(t *testing.T) {
	t.Parallel()
	r := New(time.Second)
	r.Heartbeat(hb("a", 1), t0)
	r.Assigned("a", 7, 100, t0)
	r.Done(7, 99) // stale token: the lease stays
	if s := r.Slots(1); len(s) != 0 {
		t.Fatalf("slot freed by a stale token: %+v", s)
	}
	r.Done(7, 100)
	if s := r.Slots(1); len(s) != 1 {
		t.Fatalf("slot not freed by the right token: %+v", s)
	}
}

func TestReportedInFlightLimitsSlots(t *testing.T) {
	t.Parallel()
	r := New(time.Second)
	h := hb("a", 4)
	h.InFlight = []wire.InFlight{{JobID: 1, LeaseToken: 1}, {JobID: 2, LeaseToken: 2}, {JobID: 3, LeaseToken: 3}}
	r.Heartbeat(h, t0) // runs 3 attempts the registry does not count (e.g. after it rejoined)
	if got := r.Slots(10); len(got) != 1 || len(got[0].Slots) != 1 {
		t.Fatalf("Slots = %+v, want 1 free slot (4 - 3 reported)", got)
	}
}

// TestStopsUntilForgotten: a stopped worker is returned, with when it
// stopped, until it is forgotten (its leases were released; the reaper may
// have to wait for its results first) or heard from again.
func TestStopsUntilForgotten(t *testing.T) {
	t.Parallel()
	r := New(time.Second)
	r.Heartbeat(hb("a", 1), t0)
	r.Heartbeat(hb("b", 1), t0)
	r.Heartbeat(hb("c", 1), t0)
	if got := r.Stops(); len(got) != 0 {
		t.Fatalf("Stops = %v, want none yet", got)
	}
	r.Stopped("c", t0.Add(time.Second))
	r.Stopped("a", t0)
	want := []Stop{{ID: "a", At: t0}, {ID: "c", At: t0.Add(time.Second)}}
	for range 2 {
		if got := r.Stops(); !reflect.DeepEqual(got, want) {
			t.Fatalf("Stops = %v, want %v (neither forgotten yet)", got, want)
		}
	}
	if s := r.Slots(5); !reflect.DeepEqual(s, []SlotGroup{{Slots: []string{"b"}}}) {
		t.Fatalf("Slots = %+v, want only b", s)
	}
	r.Forget("a")
	r.Heartbeat(hb("c", 1), t0.Add(2*time.Second)) // c came back
	if got := r.Stops(); len(got) != 0 {
		t.Fatalf("Stops after a was forgotten and c came back = %v, want none", got)
	}
}

func TestTouchAllSparesWorkersFromExpiry(t *testing.T) {
	t.Parallel()
	r := New(time.Second)
	r.Heartbeat(hb("a", 1), t0)
	r.TouchAll(t0.Add(5 * time.Second))
	if gone := r.Expire(t0.Add(5500 * time.Millisecond)); len(gone) != 0 {
		t.Fatalf("Expire after TouchAll = %v, want none", gone)
	}
}

func TestUsable(t *testing.T) {
	t.Parallel()
	r := New(time.Second)
	r.Heartbeat(hb("a", 1), t0)
	d := hb("d", 1)
	d.Draining = true
	r.Heartbeat(d, t0)
	r.Heartbeat(hb("old", 1), t0.Add(-time.Hour))
	r.Expire(t0)
	for id, want := range map[string]bool{"a": true, "d": false, "old": false, "unknown": false} {
		if got := r.Usable(id); got != want {
			t.Errorf("Usable(%s) = %v, want %v", id, got, want)
		}
	}
}

// TestKnown: every worker the registry holds is known, whatever its state
// (a gone one until Remove forgets it, one only seen holding a lease), and
// nothing else.
func TestKnown(t *testing.T) {
	t.Parallel()
	r := New(time.Second)
	r.Heartbeat(hb("a", 1), t0)
	r.Heartbeat(hb("old", 1), t0.Add(-time.Hour))
	r.Expire(t0)
	r.Assigned("leased", 1, 11, t0)
	want := map[string]bool{"a": true, "old": true, "leased": true}
	if got := r.Known([]string{"a", "old", "leased", "unknown", "a"}); !reflect.DeepEqual(got, want) {
		t.Fatalf("Known = %v, want %v", got, want)
	}
	r.Remove(t0.Add(2*time.Hour), time.Minute)
	if got := r.Known([]string{"old"}); len(got) != 0 {
		t.Fatalf("Known after Remove = %v, want old forgotten", got)
	}
}

// TestSlotsPrefetchAfterFreeSlots: a worker's prefetch is offered only
// after every free slot of its group, so a job waits on a busy worker only
// when no worker has a slot for it.
func TestSlotsPrefetchAfterFreeSlots(t *testing.T) {
	t.Parallel()
	r := New(3 * time.Second)
	a, b := hb("a", 2), hb("b", 2)
	a.Prefetch, b.Prefetch = 2, 1
	r.Heartbeat(a, t0)
	r.Heartbeat(b, t0)
	r.Assigned("a", 1, 1, t0)
	r.Assigned("a", 2, 2, t0) // a: both slots busy, the most recently assigned
	got := r.Slots(100)
	want := []SlotGroup{{Slots: []string{"b", "b", "b", "a", "a"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Slots = %+v, want b's two free slots, then prefetch in LRU order: b, a, a", got)
	}
	if got := r.Slots(2); !reflect.DeepEqual(got[0].Slots, []string{"b", "b"}) {
		t.Fatalf("Slots(2) = %+v, want b's free slots only", got)
	}
	r.Assigned("a", 3, 3, t0)
	r.Assigned("a", 4, 4, t0) // a: slots and prefetch full
	if got := r.Slots(100); !reflect.DeepEqual(got[0].Slots, []string{"b", "b", "b"}) {
		t.Fatalf("Slots = %+v, want b's slots and prefetch only", got)
	}
	for _, w := range r.Snapshot() {
		if w.ID == "a" && w.State() != StateBusy {
			t.Errorf("a with 4 jobs on 2 slots + 2 prefetch is %s, want busy", w.State())
		}
	}
}

func TestDrainRequestedGetsNoSlots(t *testing.T) {
	t.Parallel()
	r := New(time.Second)
	r.Heartbeat(hb("a", 2), t0)
	r.Heartbeat(hb("b", 2), t0)
	r.SetDrainRequested([]string{"b"})
	if got := r.Slots(10); len(got) != 1 || !reflect.DeepEqual(got[0].Slots, []string{"a", "a"}) {
		t.Errorf("slots = %+v; want a's only", got)
	}
	snap := r.Snapshot()
	if snap[1].State() != StateDraining || r.Usable("b") {
		t.Errorf("b is %s, usable %v; want draining, not usable", snap[1].State(), r.Usable("b"))
	}
	r.Heartbeat(hb("b", 2), t0) // a heartbeat does not undo it
	if r.Usable("b") {
		t.Error("a heartbeat cleared the drain")
	}
	r.SetDrainRequested(nil)
	if !r.Usable("b") {
		t.Error("b is still drained after its flag went")
	}
	// A worker that joins under a drained id (restarted after the registry
	// forgot it) is held back from its first heartbeat.
	r.SetDrainRequested([]string{"c"})
	r.Heartbeat(hb("c", 2), t0)
	if r.Usable("c") {
		t.Error("c joined under a drained id and is usable")
	}
	r.SetDrainRequested(nil)
	if !r.Usable("c") {
		t.Error("c is still drained after its flag went")
	}
}
