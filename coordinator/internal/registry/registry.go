// Package registry is the leader coordinator's view of the worker fleet:
// who is alive (by when its heartbeats arrived in Redis, on Redis's clock:
// see the coordinator's heartbeat reader), which
// job types each handles, which leases each holds, and who was assigned work
// least recently. It makes the assignment decision (Slots) as a pure
// function of that state, so it is tested without servers and with an
// injected clock.
package registry

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dtsched/dts/internal/wire"
)

// Worker states.
const (
	StateAvailable   = "available"   // alive with a free slot
	StateBusy        = "busy"        // alive, every slot taken
	StateDraining    = "draining"    // alive, shutting down: gets no new jobs
	StateUnavailable = "unavailable" // missed its heartbeats or stopped
)

// Worker is one worker as the registry knows it.
type Worker struct {
	ID    string
	Types []string // sorted; "*" means any name
	// Queues are the queues it serves with their weights, as its
	// heartbeat declared them (WORKER_QUEUES); nil: every queue.
	Queues      []wire.QueueWeight
	Concurrency int
	// Prefetch is how many jobs beyond Concurrency it takes, each waiting
	// for a slot (WORKER_PREFETCH).
	Prefetch int
	// Codec is the newest delivery codec it reads (wire.CodecJSON or
	// wire.CodecBinary), from its heartbeats.
	Codec int
	// Protocol is the worker protocol version its heartbeats announce (1
	// when they do not say). A worker whose version this coordinator does
	// not speak (wire.ProtocolSupported) gets no jobs and shows as
	// draining; its leases are extended and its results applied as any
	// worker's, since those fields mean the same in every version.
	Protocol int
	Draining bool // the worker said it is shutting down
	// DrainRequested: an operator asked that it get no new jobs (POST
	// /workers/{id}/drain); the leader reads the flags from PostgreSQL at
	// every worker sync (SetDrainRequested). It keeps its running jobs.
	DrainRequested bool
	Host, Version  string // what its heartbeats say
	Gone           bool   // unavailable: missed heartbeats or said it stopped
	// StoppedAt is when it said it stopped (on Redis's clock); zero
	// otherwise. The worker is forgotten once its leftover leases are
	// released.
	StoppedAt time.Time
	// Reported is how many jobs it said it runs in its last heartbeat.
	// After it was unavailable and comes back, old attempts may still run
	// that the registry no longer counts; slots respect the larger number.
	Reported int
	LastSeen time.Time
	// ExtendedAt is when (on the coordinator's clock) the leases this
	// worker reported were last extended in PostgreSQL: the reaper judges
	// its expired leases only if that is recent.
	ExtendedAt time.Time
	// lastAssigned orders workers for LRU: a counter, so that two
	// assignments in the same instant still have an order.
	lastAssigned   uint64
	LastAssignedAt time.Time
	InFlight       map[int64]int64 // job id → lease token
	// groupKey names its slot group (Slots): its types and queues, made
	// when a heartbeat sets them rather than in every dispatch round.
	groupKey string
}

// State returns the worker's state.
func (w *Worker) State() string {
	switch {
	case w.Gone:
		return StateUnavailable
	case w.Draining || w.DrainRequested || !wire.ProtocolSupported(w.Protocol):
		return StateDraining
	case w.busySlots() >= w.Concurrency:
		return StateBusy
	}
	return StateAvailable
}

func (w *Worker) busySlots() int { return max(len(w.InFlight), w.Reported) }

// free is how many more jobs it takes: free slots, then prefetch.
func (w *Worker) free() int {
	if w.Gone || w.Draining || w.DrainRequested || !wire.ProtocolSupported(w.Protocol) {
		return 0
	}
	return max(w.Concurrency+w.Prefetch-w.busySlots(), 0)
}

// freeSlots is how many more jobs it would start at once.
func (w *Worker) freeSlots() int { return min(w.free(), max(w.Concurrency-w.busySlots(), 0)) }

// Registry is safe for concurrent use.
type Registry struct {
	mu       sync.Mutex
	workers  map[string]*Worker
	owner    map[int64]string // job id → worker id
	known    map[string]bool  // job types some worker names explicitly
	deadline time.Duration    // silence after which a worker is unavailable
	seq      uint64
	// drainRequested is the last SetDrainRequested list: a worker that
	// joins under one of its ids (a drained worker restarted after the
	// registry forgot it) is held back from its first heartbeat, not from
	// the next sync.
	drainRequested map[string]bool
}

// New returns an empty registry in which a worker that has not been heard
// from for deadline (heartbeat interval × allowed misses) is unavailable.
func New(deadline time.Duration) *Registry {
	return &Registry{workers: map[string]*Worker{}, owner: map[int64]string{}, known: map[string]bool{}, deadline: deadline}
}

// Heartbeat records a heartbeat received at now. It returns true when the
// worker is new or comes back from unavailable.
func (r *Registry) Heartbeat(hb wire.Heartbeat, now time.Time) (joined bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.workers[hb.WorkerID]
	if !ok {
		w = &Worker{ID: hb.WorkerID, InFlight: map[int64]int64{}, DrainRequested: r.drainRequested[hb.WorkerID]}
		r.workers[hb.WorkerID] = w
	}
	joined = !ok || w.Gone
	types := slices.Clone(hb.JobTypes)
	sort.Strings(types)
	if !slices.Equal(types, w.Types) {
		for _, t := range types {
			if t != "*" {
				r.known[t] = true // never shrinks: a bounded set of handler names
			}
		}
	}
	w.Types, w.Concurrency, w.Codec, w.Draining, w.LastSeen, w.Gone = types, hb.Concurrency, hb.Codec, hb.Draining, now, false
	w.Prefetch, w.Reported, w.StoppedAt = hb.Prefetch, len(hb.InFlight), time.Time{}
	w.Host, w.Version, w.Protocol = hb.Host, hb.Version, hb.Protocol
	if w.Protocol == 0 {
		w.Protocol = 1 // a worker that does not say speaks version 1
	}
	w.Queues = checkQueues(hb.Queues, w.Queues)
	w.groupKey = groupKey(w.Types, w.Queues)
	return joined
}

// groupKey is the slot group of workers with these types and queues: the
// catch-all "*" or the types, then the queues if the worker names any.
func groupKey(types []string, queues []wire.QueueWeight) string {
	k := strings.Join(types, "\x00")
	if slices.Contains(types, "*") {
		k = "*"
	}
	if queues != nil {
		k += "\x01" + wire.FormatQueueWeights(queues)
	}
	return k
}

// checkQueues returns the queue list of a heartbeat, keeping the previous
// one (prev) when it is equal, so that an unchanged list costs nothing.
// Heartbeats are input: entries with a bad name, a weight out of range or
// a name already listed are dropped and the list is cut at
// wire.MaxWorkerQueues entries. A list left with nothing is nil (every
// queue), as a worker sends when WORKER_QUEUES is unset.
func checkQueues(qs, prev []wire.QueueWeight) []wire.QueueWeight {
	if slices.Equal(qs, prev) {
		return prev
	}
	var out []wire.QueueWeight
	for _, q := range qs {
		if len(out) == wire.MaxWorkerQueues {
			break
		}
		if wire.ValidQueueName(q.Name) && q.Weight >= 0 && q.Weight <= wire.MaxQueueWeight &&
			!slices.ContainsFunc(out, func(o wire.QueueWeight) bool { return o.Name == q.Name }) {
			out = append(out, q)
		}
	}
	return out
}

// Stopped marks a worker unavailable at once (it said it stopped at now).
func (r *Registry) Stopped(id string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.workers[id]; ok {
		w.Gone, w.StoppedAt, w.Reported = true, now, 0
	}
}

// Stop is a worker that said it stopped, and when.
type Stop struct {
	ID string
	At time.Time
}

// Stops returns the workers that said they stopped, by id. Each is
// returned again until it is forgotten (Forget: its leftover leases were
// released) or heard from again.
func (r *Registry) Stops() []Stop {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Stop
	for _, w := range r.workers {
		if !w.StoppedAt.IsZero() {
			out = append(out, Stop{ID: w.ID, At: w.StoppedAt})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// TouchAll marks every available worker as heard from at now: after the
// coordinator itself could not read heartbeats, silence proves nothing.
func (r *Registry) TouchAll(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.workers {
		if !w.Gone {
			w.LastSeen = now
		}
	}
}

// Extended records that the leases the given workers reported were
// extended (committed) at now.
func (r *Registry) Extended(ids []string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if w, ok := r.workers[id]; ok {
			w.ExtendedAt = now
		}
	}
}

// Unextended returns the workers that are alive but whose reported leases
// have not been extended since before (sorted): their leases may have run
// out only because the coordinator stalled, so none is judged expired yet.
// A worker that stays silent becomes unavailable and is reclaimed then.
func (r *Registry) Unextended(before time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, w := range r.workers {
		if !w.Gone && w.ExtendedAt.Before(before) {
			out = append(out, w.ID)
		}
	}
	sort.Strings(out)
	return out
}

// Lease is one lease the registry recorded for a worker.
type Lease struct {
	JobID int64
	Token int64
}

// Expired is a worker that just became unavailable, with the leases it held
// at that moment: the only ones its reclaim may touch (a worker that comes
// back under the same id keeps the leases it gets after).
type Expired struct {
	ID     string
	Leases []Lease
}

// Expire marks unavailable every worker silent for longer than the deadline
// at now (on the clock heartbeats are timed with) and returns those that
// just became unavailable, sorted by id.
func (r *Registry) Expire(now time.Time) []Expired {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Expired
	for _, w := range r.workers {
		if !w.Gone && now.Sub(w.LastSeen) > r.deadline {
			w.Gone = true
			out = append(out, Expired{ID: w.ID, Leases: w.leases()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Leases returns the leases recorded for a worker, by job id.
func (r *Registry) Leases(id string) []Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.workers[id]; ok {
		return w.leases()
	}
	return nil
}

func (w *Worker) leases() []Lease {
	out := make([]Lease, 0, len(w.InFlight))
	for id, tok := range w.InFlight {
		out = append(out, Lease{JobID: id, Token: tok})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].JobID < out[j].JobID })
	return out
}

// SlotGroup is a set of free slots whose workers handle the same job types
// and serve the same queues with the same weights.
type SlotGroup struct {
	Types  []string           // nil: any job name
	Queues []wire.QueueWeight // nil: every queue
	Slots  []string           // worker ids, the next job's worker first
}

// Slots returns the free slots grouped by the job types their workers
// handle, at most max in each group. Every group with a free slot is in
// the result: each group is claimed for by a statement of its own, so one
// group's slots never use up another's offer (a budget shared by all the
// groups went to the first in order, and a worker whose names sorted last
// waited forever beside idle ones). Within a group, slots go round-robin
// over the workers in least-recently-assigned order: the first job goes to
// the worker assigned longest ago, the next to the one after it, and so on
// while slots remain. That is exactly LRU when each assignment moves its
// worker to the back.
func (r *Registry) Slots(max int) []SlotGroup {
	r.mu.Lock()
	defer r.mu.Unlock()
	byKey := map[string][]*Worker{}
	for _, w := range r.workers {
		// A worker that has named no job type (one a new leader knows
		// only from its leases, until its first heartbeat) gets nothing: a
		// group without names would claim every name.
		if w.free() > 0 && len(w.Types) > 0 {
			byKey[w.groupKey] = append(byKey[w.groupKey], w)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	// Groups of workers with specific types claim first, so that their
	// jobs are not all taken by the catch-all workers' claim, which excludes
	// no name and so runs last.
	sort.Strings(keys)
	anyTypes := func(k string) bool { return k == "*" || strings.HasPrefix(k, "*\x01") }
	sort.SliceStable(keys, func(i, j int) bool { return !anyTypes(keys[i]) && anyTypes(keys[j]) })
	var out []SlotGroup
	for _, k := range keys {
		left := max
		ws := byKey[k]
		sort.Slice(ws, func(i, j int) bool {
			if ws[i].lastAssigned != ws[j].lastAssigned {
				return ws[i].lastAssigned < ws[j].lastAssigned
			}
			return ws[i].ID < ws[j].ID
		})
		g := SlotGroup{Queues: slices.Clone(ws[0].Queues)}
		if !anyTypes(k) {
			g.Types = slices.Clone(ws[0].Types)
		}
		// Free slots first, then prefetch: a job waits on a busy worker
		// only when no worker of the group has a slot for it.
		for _, capacity := range []func(*Worker) int{(*Worker).freeSlots, func(w *Worker) int { return w.free() - w.freeSlots() }} {
			for round := 0; left > 0; round++ {
				added := false
				for _, w := range ws {
					if left > 0 && capacity(w) > round {
						g.Slots = append(g.Slots, w.ID)
						left--
						added = true
					}
				}
				if !added {
					break
				}
			}
		}
		if len(g.Slots) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// Assigned records that a job was leased to a worker (in slot order: call
// it in the order the jobs were assigned).
func (r *Registry) Assigned(workerID string, jobID, token int64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.workers[workerID]
	if !ok {
		w = &Worker{ID: workerID, InFlight: map[int64]int64{}, Gone: true}
		r.workers[workerID] = w
	}
	r.seq++
	w.lastAssigned, w.LastAssignedAt = r.seq, now
	w.InFlight[jobID] = token
	r.owner[jobID] = workerID
}

// Done forgets a lease (its result was applied or it was reclaimed). A token
// of 0 forgets whatever lease the job has.
func (r *Registry) Done(jobID, token int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.owner[jobID]
	if !ok {
		return
	}
	w := r.workers[id]
	if t, ok := w.InFlight[jobID]; ok && (token == 0 || t == token) {
		delete(w.InFlight, jobID)
		delete(r.owner, jobID)
	}
}

// Snapshot returns copies of every worker, sorted by id.
func (r *Registry) Snapshot() []Worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Worker, 0, len(r.workers))
	for _, w := range r.workers {
		c := *w
		c.Types = slices.Clone(w.Types)
		c.Queues = slices.Clone(w.Queues)
		c.InFlight = make(map[int64]int64, len(w.InFlight))
		for k, v := range w.InFlight {
			c.InFlight[k] = v
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Remove forgets workers unavailable, holding no lease, and silent for
// longer than keep at now, and returns their ids.
func (r *Registry) Remove(now time.Time, keep time.Duration) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id, w := range r.workers {
		if w.Gone && len(w.InFlight) == 0 && now.Sub(w.LastSeen) > keep {
			delete(r.workers, id)
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Codec is the newest codec a worker announced (wire.CodecJSON if unknown).
func (r *Registry) Codec(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.workers[id]; ok {
		return w.Codec
	}
	return wire.CodecJSON
}

// Known returns which of ids the registry holds, in any state (gone ones
// included, until Remove forgets them), under one lock: the result reader
// asks it for every read, so it copies nothing else.
func (r *Registry) Known(ids []string) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		if _, ok := r.workers[id]; ok {
			out[id] = true
		}
	}
	return out
}

// Usable reports whether a worker is known, alive, not draining, and
// speaks a protocol version this coordinator serves.
func (r *Registry) Usable(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.workers[id]
	return ok && !w.Gone && !w.Draining && !w.DrainRequested && wire.ProtocolSupported(w.Protocol)
}

// SetDrainRequested marks the workers in ids as asked to drain, and every
// other worker as not; a worker that joins later under one of the ids is
// marked as it joins.
func (r *Registry) SetDrainRequested(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainRequested = make(map[string]bool, len(ids))
	for _, id := range ids {
		r.drainRequested[id] = true
	}
	for id, w := range r.workers {
		w.DrainRequested = r.drainRequested[id]
	}
}

// Forget removes a worker that stopped cleanly (its leases already
// released): it left on purpose and is not a worker down.
func (r *Registry) Forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.workers[id]; ok {
		for jobID := range w.InFlight {
			delete(r.owner, jobID)
		}
		delete(r.workers, id)
	}
}

// KnownType reports whether some worker names the job type explicitly (not
// through "*"). Metrics label job types only when they are known, so that
// arbitrary submitted names cannot grow label cardinality.
func (r *Registry) KnownType(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.known[name]
}

// Touch marks a worker as heard from at now without changing anything else
// (a new leader gives workers known only from their leases one deadline to
// heartbeat before they count as dead).
func (r *Registry) Touch(id string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.workers[id]; ok {
		w.LastSeen, w.Gone = now, false
		if w.Concurrency == 0 {
			w.Concurrency = len(w.InFlight) // no new work until it heartbeats
		}
	}
}
