package coordinator

import (
	"cmp"
	"context"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/dtsched/dts/coordinator/internal/registry"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/retry"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// dispatchStore is what the dispatcher writes: claims, and releases of
// jobs it could not deliver.
type dispatchStore interface {
	JobClaimBatch(ctx context.Context, p store.JobClaimParams) ([]store.Claimed, error)
	JobClaimGroups(ctx context.Context, p store.JobClaimGroupsParams) ([]store.Claimed, error)
	JobClaimQueues(ctx context.Context, p store.JobClaimQueuesParams) ([]store.Claimed, error)
	JobClaimLimited(ctx context.Context, p store.JobClaimLimitedParams) ([]store.Claimed, error)
	QueueSettingsList(ctx context.Context) ([]store.QueueSetting, error)
	JobLimitedWaiting(ctx context.Context) (bool, error)
	JobReleaseMany(ctx context.Context, epoch int64, rs []store.Release) ([]int64, error)
}

// dispatchQueue delivers jobs and carries the submitters' wake-ups.
type dispatchQueue interface {
	Deliver(ctx context.Context, byWorker map[string]queue.Outbox) error
	SubscribeWake(ctx context.Context) (<-chan wire.Wake, func())
}

// dispatcher leases due jobs to free slots whenever something may have
// changed: a submit's wake-up, a freed slot, a new worker, or the poll timer
// (which is how retries and scheduled jobs come due). One round claims for
// every group of free slots (workers handling the same job types and
// serving the same queues) and delivers in a pipeline. Groups whose claims
// are plain share one statement and one delivery (claimRun); the others
// have a statement each, and one whose claim fails does not stop the
// others.
//
// Queues cost nothing until they are used: while no queue is paused or
// capped and a group's workers serve every queue, its claim is the plain
// one (dts_claim_jobs). Otherwise it is the claim by queue, with the
// group's slots split by weight (shareSplitter).
//
// Limits cost nothing until they are used either: jobs with a limit_key
// are in neither claim's index, and the limited claim (dts_claim_limited_jobs)
// runs only while the dispatcher's copy, reloaded every poll interval,
// says such jobs are waiting, or a submitter's wake-up said it made some
// due (a limited wake-up, queue.Wake). Then a group's slots are shared between the
// limited claim and the other (limitShare).
type dispatcher struct {
	base
	startstop.Loop
	store dispatchStore
	queue dispatchQueue
	// claimSize is how many slots the next round offers (nextClaimSize).
	claimSize int
	// delivering is the delivery in flight (deliver).
	delivering inFlight
	// queues is the copy of the queues table, loaded at queuesAt.
	queues   queueSettings
	queuesAt time.Time
	// splitters keep each group's weighted round robin (by groupKey).
	splitters map[string]*shareSplitter
	// limited says jobs with a limit_key may be waiting, as loaded at
	// limitedAt; limitedLoaded is false until the first load succeeds
	// (and limited true, so that such jobs are claimed meanwhile).
	limited       bool
	limitedLoaded bool
	limitedAt     time.Time
	// limitedFirst says the limited claim goes first in the next group's
	// claim; it alternates (limitShare).
	limitedFirst bool
	// cooldown is the least time from one round's start to the next while
	// no due job waits for a slot; 0 means defaultClaimCooldown. wait
	// waits out the rest of it (retry.Sleep when nil; tests replace it).
	cooldown time.Duration
	wait     func(ctx context.Context, d time.Duration)
	// limitedRest holds, by groupKey, until when a group's limited claim
	// is skipped: its last one found nothing startable (limitedRestShare).
	limitedRest map[string]time.Time
	// idle holds the groups (by groupKey) whose last claim found no due
	// job, and allAt is when the last round claimed for every group
	// (roundScope).
	idle  map[string]bool
	allAt time.Time
	// jobBytes holds, by groupKey, the bytes per job of the group's last
	// claim; it bounds the group's next one (claimSlots).
	jobBytes map[string]int
}

// roundScope says which groups a round claims for: every group whose last
// claim found jobs, and the idle ones (whose last claim found none) only
// if all is set or the round's wake-up names a job name they handle. A
// claim statement per group per round would cost a fleet of many groups
// (workers with different job names or queues) a statement per group at
// every submission; an idle group's due jobs come from submissions (whose
// wake-up names them), or come due by time (retries, scheduled jobs:
// every round that starts a poll interval after the last full one claims
// for every group), or are made due by an operator (whose wake-up says
// any name).
type roundScope struct {
	all  bool
	wake wire.Wake // the names of a wake-up; Names nil: any name
}

// scopeAll claims for every group.
var scopeAll = roundScope{all: true}

// scopeBusy claims for the groups whose last claim found jobs.
var scopeBusy = roundScope{wake: wire.Wake{Names: []string{}}}

// While jobs come in a trickle every submit's wake-up would start a round
// of its own: a claim statement and its commit, a delivery and a worker's
// wake-up for each job. So while no due job waits for a slot (slotState)
// a round starts at least defaultClaimCooldown after the one before, and
// claims in one statement whatever came due meanwhile. A job that comes
// after a quiet spell is claimed at once; one that comes right after a
// round waits at most the cooldown. Under a steady trickle that saves
// a large share of PostgreSQL's CPU for a fraction of a millisecond at
// the median start (docs/benchmarks.md). While jobs wait for slots
// there is no cooldown: the round after one that filled its slots or
// found none free starts at once, so a backlog drains as before. River
// spaces its fetches the same way (FetchCooldown).
const defaultClaimCooldown = 2 * time.Millisecond

// Start starts dispatching; Stop stops it.
func (d *dispatcher) Start(ctx context.Context) error {
	d.StartLoop(ctx, d.run)
	return nil
}

func (d *dispatcher) run(ctx context.Context) {
	defer func() { _ = d.delivering.wait() }()
	wake, stop := d.queue.SubscribeWake(ctx)
	defer stop()
	t := time.NewTicker(d.cfg.PollInterval)
	defer t.Stop()
	var last time.Time // when the last round started
	scope := scopeAll
	for ctx.Err() == nil {
		d.coolDown(ctx, last)
		last = time.Now()
		more, err := d.round(ctx, scope)
		if err != nil {
			_ = retry.Sleep(ctx, 100*time.Millisecond)
			scope = scopeAll
			continue
		}
		scope = scopeBusy
		if more {
			continue
		}
		select {
		case <-ctx.Done():
		case w := <-wake:
			scope = d.woken(w)
		case <-d.l.kick:
		case <-t.C:
			scope = scopeAll
		}
	}
}

// woken returns the scope of the round a wake-up asks for. When it says
// jobs with a limit_key were submitted, they are claimed now: not after
// the next reload of the flag (loadLimited), nor after the rest of a
// limited claim that found nothing before they came (restLimited).
func (d *dispatcher) woken(w wire.Wake) roundScope {
	if w.Limited {
		d.limited = true
		clear(d.limitedRest)
	}
	return roundScope{wake: w}
}

// coolDown waits until the cooldown has passed since last, unless due jobs
// wait for slots.
func (d *dispatcher) coolDown(ctx context.Context, last time.Time) {
	if d.l.slots.bound.Load() {
		return
	}
	w := cmp.Or(d.cooldown, defaultClaimCooldown) - time.Since(last)
	if w <= 0 {
		return
	}
	if d.wait != nil {
		d.wait(ctx, w)
		return
	}
	_ = retry.Sleep(ctx, w)
}

// round runs one dispatch round for the groups of scope. It reports
// whether some group filled every slot it offered (so more due jobs may be
// waiting), and the first error.
func (d *dispatcher) round(ctx context.Context, scope roundScope) (more bool, err error) {
	if d.claimSize == 0 {
		d.claimSize = min(minClaimSize, d.cfg.ClaimBatch)
	}
	d.loadQueues(ctx)
	d.loadLimited(ctx)
	// Limited jobs become claimable when another of their key finishes,
	// which no wake-up names; and after a poll interval every group's
	// retries and scheduled jobs may have come due.
	if d.limited || time.Since(d.allAt) >= d.cfg.PollInterval {
		scope = scopeAll
	}
	if scope.all {
		d.allAt = time.Now()
	}
	groups := d.l.workers.Slots(d.claimSize)
	if d.idle == nil || len(d.idle) > maxSplitters {
		d.idle = map[string]bool{} // bounded as the splitters are
	}
	offered, total, free := 0, 0, 0
	for i, g := range groups {
		free += len(g.Slots)
		if !scope.all && d.idle[groupKey(g)] && !scope.wake.Handles(g.Types) {
			groups[i].Slots = nil
			continue
		}
		offered += len(g.Slots)
	}
	// note records one group's claim; it reports whether the round must
	// stop (the leader was deposed).
	note := func(key string, n int, filled bool, gerr error) bool {
		total += n
		more = more || filled
		if gerr != nil && err == nil {
			err = gerr
		}
		if gerr == nil && n == 0 {
			d.idle[key] = true
		} else {
			delete(d.idle, key)
		}
		select {
		case <-d.l.deposed:
			return true
		default:
			return false
		}
	}
	var run claimRun
	flush := func() bool {
		defer run.reset()
		switch len(run.groups) {
		case 0:
			return false
		case 1:
			n, filled, gerr := d.dispatchGroup(ctx, run.groups[0], run.keys[0])
			return note(run.keys[0], n, filled, gerr)
		}
		ns, filled, gerr := d.dispatchRun(ctx, run.groups, run.keys)
		stop := false
		for i, key := range run.keys {
			stop = note(key, ns[i], filled[i], gerr) || stop
		}
		return stop
	}
	for _, g := range groups {
		if len(g.Slots) == 0 {
			continue
		}
		key := groupKey(g)
		if !d.plainClaim(g) {
			if flush() {
				return false, err
			}
			if n, filled, gerr := d.dispatchGroup(ctx, g, key); note(key, n, filled, gerr) {
				return false, err
			}
			continue
		}
		g.Slots = d.claimSlots(key, g.Slots)
		bytes := d.runBytes(key, len(g.Slots))
		if !run.fits(g, bytes, d.cfg.ClaimBatch, d.cfg.ClaimBytes) && flush() {
			return false, err
		}
		run.add(g, key, bytes)
	}
	if flush() {
		return false, err
	}
	if err == nil {
		d.claimSize = nextClaimSize(d.claimSize, offered, total, more, d.cfg.ClaimBatch)
	}
	// An idle group skipped has free slots and no due job: it is no sign
	// that jobs wait for slots.
	d.l.slots.set(more || free == 0 || err != nil)
	return more, err
}

// loadQueues reloads the queue settings when the copy is older than the
// poll interval. A failed load keeps the copy it has (or, before the first
// success, none, which makes every claim honour queues).
func (d *dispatcher) loadQueues(ctx context.Context) {
	if d.queues.loaded && time.Since(d.queuesAt) < d.cfg.PollInterval {
		return
	}
	rows, err := d.store.QueueSettingsList(ctx)
	if err != nil {
		d.storeError(ctx, storeOpQueueSettings, err)
		return
	}
	d.queues, d.queuesAt = newQueueSettings(rows), time.Now()
	d.metrics.queuesConfigured.Set(float64(len(rows)))
}

// loadLimited reloads whether jobs with a limit_key are waiting when the
// copy is older than the poll interval. A failed load keeps the copy (or,
// before the first success, says they may be).
func (d *dispatcher) loadLimited(ctx context.Context) {
	if d.limitedLoaded && time.Since(d.limitedAt) < d.cfg.PollInterval {
		return
	}
	waiting, err := d.store.JobLimitedWaiting(ctx)
	if err != nil {
		d.storeError(ctx, storeOpLimitedWaiting, err)
		if !d.limitedLoaded {
			d.limited = true
		}
		return
	}
	d.limited, d.limitedLoaded, d.limitedAt = waiting, true, time.Now()
}

// claim leases jobs for one group's slots. While no job with a limit_key
// waits, that is claimUnlimited alone; otherwise limitShare divides the
// slots between it and the limited claim. It may return jobs with an
// error (one of two claims failed): they are leased and must be delivered.
func (d *dispatcher) claim(ctx context.Context, g registry.SlotGroup) ([]store.Claimed, error) {
	if !d.limited {
		return d.claimUnlimited(ctx, g, g.Slots)
	}
	key := groupKey(g)
	if until, ok := d.limitedRest[key]; ok {
		if d.now().Before(until) {
			return d.claimUnlimited(ctx, g, g.Slots)
		}
		delete(d.limitedRest, key)
	}
	limited := func(slots []string) ([]store.Claimed, error) {
		p := store.JobClaimLimitedParams{JobClaimParams: store.JobClaimParams{Epoch: d.l.epoch, Types: g.Types,
			Slots: slots, Lease: d.cfg.LeaseDuration}}
		if g.Queues != nil {
			p.Queues = make([]string, 0, len(g.Queues))
			for _, q := range g.Queues {
				if !d.queues.paused[q.Name] {
					p.Queues = append(p.Queues, q.Name)
				}
			}
			if len(p.Queues) == 0 {
				return nil, nil
			}
		}
		start := d.now()
		got, err := d.store.JobClaimLimited(ctx, p)
		if err == nil && len(got) < len(slots) {
			d.restLimited(key, start)
		}
		return got, err
	}
	unlimited := func(slots []string) ([]store.Claimed, error) { return d.claimUnlimited(ctx, g, slots) }
	first, second := unlimited, limited
	if d.limitedFirst {
		first, second = limited, unlimited
	}
	d.limitedFirst = !d.limitedFirst
	return limitShare(g.Slots, first, second)
}

// limitedRestShare bounds the share of the dispatcher's time spent on
// limited claims that find nothing: after one found fewer startable jobs
// than the slots it was offered (every waiting key is full, or rate
// limited), the group's next limited claim waits limitedRestShare times
// that claim's duration. The claim visits every key with waiting jobs, so
// with thousands of full keys it takes a good part of a second, and run
// in every round it would make every unlimited job pay for it; with few
// keys it takes about a millisecond, and a key that gets room waits some
// 20 ms more for its next job.
const limitedRestShare = 20

// restLimited starts the rest of a group's limited claim, one that began
// at start and found nothing more to start.
func (d *dispatcher) restLimited(key string, start time.Time) {
	if d.limitedRest == nil || len(d.limitedRest) >= maxSplitters {
		d.limitedRest = map[string]time.Time{}
	}
	now := d.now()
	d.limitedRest[key] = now.Add(limitedRestShare * now.Sub(start))
}

// limitShare shares a group's slots between two claims, the limited one
// and the other, so that neither starves: the first gets half of them
// (rounded up), the second every slot the first left, and if the second
// then leaves some while the first filled its half, the first gets those
// too. So no slot stays free while either has due jobs it may take, and
// while both have plenty each gets half. Which claim goes first
// alternates from one call to the next, so with one free slot at a time
// they take turns. Slots are used in order: the first claim's jobs go to
// the first slots. After an error it stops and returns what was claimed.
func limitShare(slots []string, first, second func([]string) ([]store.Claimed, error)) ([]store.Claimed, error) {
	half := (len(slots) + 1) / 2
	got, err := first(slots[:half])
	if err != nil {
		return got, err
	}
	more, err := second(slots[len(got):])
	got = append(got, more...)
	if err != nil || len(got) == len(slots) || len(got)-len(more) < half {
		return got, err
	}
	more, err = first(slots[len(got):])
	return append(got, more...), err
}

// claimUnlimited leases jobs without a limit_key to slots of a group: the
// plain claim when queues change nothing for it, else the claim by queue.
func (d *dispatcher) claimUnlimited(ctx context.Context, g registry.SlotGroup, slots []string) ([]store.Claimed, error) {
	if len(slots) == 0 {
		return nil, nil
	}
	p := store.JobClaimParams{Epoch: d.l.epoch, Types: g.Types, Slots: slots, Lease: d.cfg.LeaseDuration}
	if g.Queues == nil && d.queues.plain() {
		return d.store.JobClaimBatch(ctx, p)
	}
	qp := store.JobClaimQueuesParams{JobClaimParams: p}
	if g.Queues != nil {
		key := groupKey(g)
		sp := d.splitters[key]
		if sp == nil {
			if d.splitters == nil || len(d.splitters) >= maxSplitters {
				// Lists come from heartbeats: bound what they can make
				// this map hold. Starting over only resets credit.
				d.splitters = map[string]*shareSplitter{}
			}
			sp = &shareSplitter{}
			d.splitters[key] = sp
		}
		qp.Queues, qp.Shares = sp.split(g.Queues, d.queues.paused, len(slots))
		if len(qp.Queues) == 0 {
			return nil, nil // every queue it serves is paused
		}
	}
	return d.store.JobClaimQueues(ctx, qp)
}

// maxSplitters bounds the groups whose weighted round robin is kept: far
// more than distinct WORKER_QUEUES lists in any fleet.
const maxSplitters = 1024

// groupKey names a slot group by its job types and queues.
func groupKey(g registry.SlotGroup) string {
	return strings.Join(g.Types, "\x00") + "\x01" + wire.FormatQueueWeights(g.Queues)
}

// plainClaim says whether a group's claim is the plain one (dts_claim_jobs):
// no job with a limit_key waits, and queues change nothing for it. Such
// claims of several groups can be one statement (dispatchRun).
func (d *dispatcher) plainClaim(g registry.SlotGroup) bool {
	return !d.limited && g.Queues == nil && d.queues.plain()
}

// claimRun gathers groups whose plain claims one statement makes
// (JobClaimGroups): consecutive in the round's order, none sharing a job
// name with another and none of any name (a transaction's own row locks do
// not make its next SKIP LOCKED skip a row), and together within what one
// claim may lease (CLAIM_BATCH jobs, about CLAIM_BYTES).
type claimRun struct {
	groups  []registry.SlotGroup // each with its slots bounded (claimSlots)
	keys    []string
	names   map[string]bool
	anyName bool // some group takes any name
	slots   int
	bytes   int
}

// fits says whether a group, expected to claim about bytes, can join the
// run.
func (r *claimRun) fits(g registry.SlotGroup, bytes, maxSlots, maxBytes int) bool {
	if len(r.groups) == 0 {
		return true
	}
	if g.Types == nil || r.anyName || r.slots+len(g.Slots) > maxSlots || r.bytes+bytes > maxBytes {
		return false
	}
	for _, name := range g.Types {
		if r.names[name] {
			return false
		}
	}
	return true
}

func (r *claimRun) add(g registry.SlotGroup, key string, bytes int) {
	if r.names == nil {
		r.names = map[string]bool{}
	}
	for _, name := range g.Types {
		r.names[name] = true
	}
	r.anyName = r.anyName || g.Types == nil
	r.groups = append(r.groups, g)
	r.keys = append(r.keys, key)
	r.slots += len(g.Slots)
	r.bytes += bytes
}

func (r *claimRun) reset() { *r = claimRun{} }

// runBytes is about how many bytes a group's claim of slots jobs leases,
// going by its last claim (claimOverhead a job before its first).
func (d *dispatcher) runBytes(key string, slots int) int {
	return slots * max(d.jobBytes[key], claimOverhead)
}

// dispatchRun claims for a run of groups (keys are their groupKeys, their
// slots already bounded by claimSlots) in one statement and delivers what
// it leased in one pipeline; it returns
// how many jobs each group claimed and whether that filled the slots it
// offered. A failure fails every group of the run.
func (d *dispatcher) dispatchRun(ctx context.Context, run []registry.SlotGroup, keys []string) ([]int, []bool, error) {
	p := store.JobClaimGroupsParams{Epoch: d.l.epoch, Lease: d.cfg.LeaseDuration, Groups: make([]store.ClaimGroup, len(run))}
	groupOf := map[string]int{} // a worker is in one group
	slots := 0
	for i, g := range run {
		p.Groups[i] = store.ClaimGroup{Types: g.Types, Slots: g.Slots}
		for _, w := range p.Groups[i].Slots {
			groupOf[w] = i
		}
		slots += len(p.Groups[i].Slots)
	}
	ns, filled := make([]int, len(run)), make([]bool, len(run))
	t0 := time.Now()
	claimed, err := d.store.JobClaimGroups(ctx, p)
	t1 := time.Now()
	d.metrics.dispatchStep.WithLabelValues("claim").Observe(t1.Sub(t0).Seconds())
	if err != nil {
		d.storeError(ctx, storeOpClaim, err)
		return ns, filled, err
	}
	bytes := make([]int, len(run))
	for i := range claimed {
		g := groupOf[claimed[i].WorkerID]
		ns[g]++
		bytes[g] += len(claimed[i].Payload) + claimOverhead
	}
	for i := range run {
		d.noteJobBytes(keys[i], bytes[i], ns[i])
		filled[i] = ns[i] == len(p.Groups[i].Slots)
	}
	if _, _, err := d.deliverClaimed(ctx, claimed, slots, t0, t1); err != nil {
		return ns, make([]bool, len(run)), err
	}
	return ns, filled, nil
}

// dispatchGroup claims jobs for one group of slots (named key) and
// delivers them; it returns how many it claimed and whether that filled
// the slots it offered.
func (d *dispatcher) dispatchGroup(ctx context.Context, g registry.SlotGroup, key string) (int, bool, error) {
	g.Slots = d.claimSlots(key, g.Slots)
	slots := g.Slots
	t0 := time.Now()
	claimed, err := d.claim(ctx, g)
	t1 := time.Now()
	d.noteJobBytes(key, claimedBytes(claimed), len(claimed))
	d.metrics.dispatchStep.WithLabelValues("claim").Observe(t1.Sub(t0).Seconds())
	if err != nil {
		d.storeError(ctx, storeOpClaim, err)
		if len(claimed) == 0 {
			return 0, false, err
		}
		// One of the limited and the other claim failed after the other
		// leased jobs: deliver those, then report the error.
		n, _, derr := d.deliverClaimed(ctx, claimed, len(slots), t0, t1)
		if derr != nil {
			return n, false, derr
		}
		return n, false, err
	}
	return d.deliverClaimed(ctx, claimed, len(slots), t0, t1)
}

// deliverClaimed delivers the jobs claimed for a group of n slots (by a
// claim that ran from claimStart to claimEnd); it returns how many were
// claimed and whether that filled the slots.
func (d *dispatcher) deliverClaimed(ctx context.Context, claimed []store.Claimed, slots int, claimStart, claimEnd time.Time) (int, bool, error) {
	d.metrics.claimBatch.Observe(float64(len(claimed)))
	n, filled := len(claimed), len(claimed) == slots
	if n == 0 {
		return 0, false, nil
	}
	// A worker may have been declared dead between Slots and the claim's
	// commit; its reclaim may already have run and missed these leases.
	// Give them back now instead of waiting for the lease to run out.
	claimed = d.dropGone(ctx, claimed)
	if len(claimed) == 0 {
		return n, filled, nil
	}
	now := time.Now()
	byWorker := map[string]queue.Outbox{}
	debug := d.log.Enabled(ctx, slog.LevelDebug)
	var spans []trace.Span // of traced jobs, ended after the push
	for i := range claimed {
		j := &claimed[i]
		// Record the lease before delivering, so a result that comes back
		// at once finds it.
		d.l.workers.Assigned(j.WorkerID, j.ID, j.LeaseToken, now)
		if debug {
			d.log.DebugContext(ctx, "job leased", "job_id", j.ID, "worker_id", j.WorkerID, "attempt", j.Attempt)
		}
		out, ok := byWorker[j.WorkerID]
		if !ok {
			out.Codec = d.l.workers.Codec(j.WorkerID)
		}
		var tp string
		if j.TraceParent != "" {
			var span trace.Span
			if tp, span = traceDispatch(j, claimStart, claimEnd); span != nil {
				spans = append(spans, span)
			}
			d.l.traces.put(j.ID, j.LeaseToken, tp)
		}
		out.Deliveries = append(out.Deliveries, wire.Delivery{
			JobID: j.ID, Name: j.Name, Queue: j.Queue, Payload: j.Payload, Attempt: j.Attempt,
			MaxRetries: j.MaxRetries, TimeoutSeconds: j.TimeoutSeconds, LeaseToken: j.LeaseToken, CreatedAt: j.CreatedAt,
			TraceParent: tp,
		})
		byWorker[j.WorkerID] = out
	}
	if err := d.delivering.wait(); err != nil {
		// The last delivery failed and gave its jobs back: Redis is
		// likely failing still. Give these back too, and let the loop
		// back off instead of claiming and releasing in a spin.
		d.undeliver(ctx, claimed)
		return n, false, err
	}
	_ = d.delivering.start(func() error { return d.deliver(ctx, byWorker, claimed, spans) })
	return n, filled, nil
}

// deliver pushes a claim's deliveries to the workers' lists (in one
// pipeline) while the dispatcher goes on to its next claim: when Redis is
// a network hop away, the push's round trip no longer holds up the
// claims (docs/scaling.md, "Distance"). One delivery is in flight at a
// time, so each worker's list gets its jobs in claim order. A failed push
// gives the jobs back.
func (d *dispatcher) deliver(ctx context.Context, byWorker map[string]queue.Outbox, claimed []store.Claimed, spans []trace.Span) error {
	t0 := time.Now()
	err := d.queue.Deliver(ctx, byWorker)
	d.metrics.dispatchStep.WithLabelValues("deliver").Observe(time.Since(t0).Seconds())
	for _, span := range spans {
		if err != nil {
			span.RecordError(err)
		}
		span.End()
	}
	if err != nil {
		d.redisError(ctx, redisOpDeliver, err)
		d.undeliver(ctx, claimed)
		return err
	}
	byName := map[string]int{}
	for _, j := range claimed {
		byName[j.Name]++
	}
	for name, count := range byName {
		d.metrics.dispatched.WithLabelValues(d.typeLabel(name)).Add(float64(count))
	}
	return nil
}

// claimSlots bounds the slots a group's claim is offered so that it
// leases about cfg.ClaimBytes of payloads at most, going by the bytes per
// job of the group's last claim (noteJobBytes). Without the bound, large
// payloads claimed CLAIM_BATCH at a time would move gigabytes per round
// through PostgreSQL, the leader's memory and one Redis command, which
// holds up every other client of Redis, heartbeats included, for as long
// as it takes. A group that has not claimed yet, or whose jobs grew
// since its last claim, may take one claim of the round's size before the
// bound catches up (at most CLAIM_BATCH times MAX_PAYLOAD_BYTES; after a
// quiet spell that size is minClaimSize).
func (d *dispatcher) claimSlots(key string, slots []string) []string {
	per := d.jobBytes[key]
	if per <= 0 {
		return slots
	}
	return slots[:min(len(slots), max(1, d.cfg.ClaimBytes/per))]
}

// claimOverhead is what a delivery carries besides its payload, roughly.
const claimOverhead = 128

// claimedBytes is about how many bytes claimed jobs take in deliveries.
func claimedBytes(claimed []store.Claimed) int {
	total := 0
	for i := range claimed {
		total += len(claimed[i].Payload) + claimOverhead
	}
	return total
}

// noteJobBytes records the bytes per job of a group's claim of jobs jobs
// of bytes bytes in all.
func (d *dispatcher) noteJobBytes(key string, bytes, jobs int) {
	if jobs == 0 {
		return
	}
	if d.jobBytes == nil || len(d.jobBytes) >= maxSplitters {
		d.jobBytes = map[string]int{} // bounded as the splitters are
	}
	d.jobBytes[key] = bytes / jobs
}

// minClaimSize is the fewest slots a dispatch round offers while jobs come
// in a trickle.
const minClaimSize = 32

// nextClaimSize sizes the next round's offer of slots from this round's:
// eight times larger after a round in which some group's claim filled the
// slots it was offered (a backlog: 32, 256, then the claim batch), four
// times what was claimed (at least minClaimSize) after a round that found
// fewer due jobs than slots, and unchanged after a round with no free slot
// to offer. Offering the whole claim batch every round would send, and have
// PostgreSQL decode, a thousand worker ids per claim while jobs arrive one
// or two at a time: that was a tenth of the coordinator's CPU at 1,000
// single submits a second.
func nextClaimSize(size, offered, claimed int, filled bool, limit int) int {
	switch {
	case offered == 0:
		return size
	case filled:
		return min(limit, 8*size)
	default:
		return min(limit, max(4*claimed, minClaimSize))
	}
}

// dropGone releases the claimed jobs whose worker is no longer usable and
// returns the rest.
func (d *dispatcher) dropGone(ctx context.Context, claimed []store.Claimed) []store.Claimed {
	keep, gone := claimed[:0:0], []store.Claimed(nil)
	for _, j := range claimed {
		if d.l.workers.Usable(j.WorkerID) {
			keep = append(keep, j)
		} else {
			gone = append(gone, j)
		}
	}
	if len(gone) > 0 {
		d.undeliver(ctx, gone)
	}
	return keep
}

// undeliver gives back jobs that were leased but could not be delivered;
// the attempt does not count. If even that fails their leases expire.
func (d *dispatcher) undeliver(ctx context.Context, claimed []store.Claimed) {
	rs := make([]store.Release, len(claimed))
	for i, j := range claimed {
		rs[i] = store.Release{ID: j.ID, LeaseToken: j.LeaseToken, WorkerID: j.WorkerID}
	}
	if _, err := d.store.JobReleaseMany(context.WithoutCancel(ctx), d.l.epoch, rs); err != nil {
		d.storeError(ctx, storeOpRelease, err)
		return
	}
	for _, j := range claimed {
		d.l.workers.Done(j.ID, j.LeaseToken)
	}
	d.metrics.reclaimed.WithLabelValues("delivery_failed").Add(float64(len(claimed)))
}
