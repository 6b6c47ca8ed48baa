package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/retry"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// resultStore is what the result applier writes.
type resultStore interface {
	JobCompleteMany(ctx context.Context, epoch int64, cs []store.Completion) ([]store.Finished, error)
	JobFailMany(ctx context.Context, epoch int64, fs []store.Failure, policy store.RetryPolicy) ([]store.FailOutcome, error)
	JobReleaseMany(ctx context.Context, epoch int64, rs []store.Release) ([]int64, error)
	JobProgressMany(ctx context.Context, epoch int64, ps []store.Progress) (int, error)
	JobEventInsertStale(ctx context.Context, epoch int64, rs []store.StaleResult) (int64, error)
	JobLogAppend(ctx context.Context, epoch int64, ls []store.LogAppend) error
}

// resultQueue is where results come from, and where dead jobs are mirrored.
type resultQueue interface {
	EnsureResultsGroup(ctx context.Context) error
	ReadResults(ctx context.Context, pending bool, max int, block time.Duration) ([]queue.ReceivedResult, []string, error)
	AckResults(ctx context.Context, ids []string) error
	PushDead(ctx context.Context, es []wire.DeadEntry) error
}

// resultApplier applies results from the results stream in batches:
// completions in one statement, failures in one transaction, releases in
// one statement, each matching the lease's token and worker. A batch is
// acknowledged only after PostgreSQL committed it.
//
// Only a result's own data can change what it does to its job. A write
// that fails for any other reason (PostgreSQL away, a lock or statement
// timeout, a cancel, a deadlock, a serialization failure, disk, memory or
// connections short: see persist) is tried again, as it is, after a
// jittered backoff, for as long as the fault lasts; no attempt is spent and
// nothing is dead-lettered for it.
//
// No result's data can hold up the others. A result's JSON passes the
// rules a submitted payload does before it reaches a statement (one that
// breaks them is recorded as a failed attempt, reason invalid_result); if
// PostgreSQL still refuses a batch for its data (job.ErrBadData), it is
// applied row by row and the row it refuses is recorded the same way. The
// pending list is read again every rescan (10 s), so results left
// unacknowledged (an ack that failed, a deposed leader that read but could
// not apply them) are not orphaned.
type resultApplier struct {
	base
	startstop.Loop
	store resultStore
	queue resultQueue
	// allowed drops results from workers the leader has not registered
	// (auth.go); the dropped ones are acknowledged with the rest.
	allowed func([]queue.ReceivedResult) []queue.ReceivedResult
	retry   store.RetryPolicy
	// rescan is how often the pending list is read again; 0 means
	// defaultResultsRescan.
	rescan time.Duration
	// lingerFor is how long a small read waits for more results while no
	// due job waits for a slot; 0 means defaultResultLinger.
	lingerFor time.Duration
	// lingering, if not nil, gets a value each time a linger starts
	// waiting (tests wait on it instead of on time).
	lingering chan<- struct{}
	// acking is the acknowledgement in flight (ackLater).
	acking inFlight
}

// While jobs come in a trickle each result arrives alone, and applying it
// alone costs a statement, a commit and a Redis round trip per job. So
// after a read of fewer than lingerBelow results the applier waits up to
// defaultResultLinger and takes what came meanwhile into the same batch,
// which saves PostgreSQL a statement and a commit per job under a steady
// trickle (docs/benchmarks.md). A job's
// start is not delayed, only the record of its end, by at most the linger.
// It lingers only while the dispatcher says no due job waits for a slot
// (slotState), and stops lingering as soon as one does: there an applied
// result is what frees a slot, and waiting cost a fifth of the throughput
// of make up's three workers of eight slots.
const (
	defaultResultLinger = 2 * time.Millisecond
	lingerBelow         = 32
)

// ackTimeout bounds an acknowledgement that outlives the applier's loop.
const ackTimeout = 5 * time.Second

// defaultResultsRescan is how often the pending list is read again.
const defaultResultsRescan = 10 * time.Second

// maxResultBytes bounds a stored result, as MAX_PAYLOAD_BYTES's default
// bounds a payload.
const maxResultBytes = 1 << 20

// Start starts applying results; Stop stops it.
func (a *resultApplier) Start(ctx context.Context) error {
	a.StartLoop(ctx, a.run)
	return nil
}

func (a *resultApplier) run(ctx context.Context) {
	if err := a.queue.EnsureResultsGroup(ctx); err != nil {
		a.redisError(ctx, redisOpResultsGroup, err)
	}
	defer func() { _ = a.acking.wait() }()
	rescan := cmp.Or(a.rescan, defaultResultsRescan)
	pending, lastRescan := true, time.Now()
	for ctx.Err() == nil {
		if time.Since(lastRescan) >= rescan {
			pending = true
		}
		if pending {
			// The pending list holds what is read but not acknowledged:
			// what was applied must be acknowledged first, or it would
			// be applied again (and rejected as stale).
			_ = a.acking.wait()
			lastRescan = time.Now()
		}
		rs, bad, err := a.queue.ReadResults(ctx, pending, a.cfg.ResultBatch, a.cfg.HeartbeatInterval)
		if err != nil {
			a.redisError(ctx, redisOpResultsRead, err)
			pending = true
			continue
		}
		if pending && len(rs) == 0 && len(bad) == 0 {
			pending = false
			continue
		}
		// A read of new entries that was not full found the stream
		// drained: once this read is applied, no result of a write that
		// failed is still waiting (resultsStuck).
		drained := !pending && len(entryIDs(rs, bad)) < a.cfg.ResultBatch
		if !a.l.holdResults(ctx, 0) {
			return
		}
		applied, reread := a.applyRead(ctx, rs, bad, !pending)
		pending = pending || reread
		if applied && drained {
			a.l.resultsStuck.Store(false)
		}
		a.l.releaseResults()
	}
}

// applyRead applies one read's results (with those a linger adds when
// fresh and few), acknowledges them and drops bad, undecodable entries. It
// reports whether it applied them all, and whether the pending list must
// be read again: some were not applied, or a read failed after Redis may
// have delivered entries to this consumer.
func (a *resultApplier) applyRead(ctx context.Context, rs []queue.ReceivedResult, bad []string, fresh bool) (applied, reread bool) {
	if fresh && len(rs) > 0 && len(rs) < lingerBelow && a.linger(ctx) {
		more, moreBad, err := a.queue.ReadResults(ctx, false, a.cfg.ResultBatch-len(rs), 0)
		if err != nil {
			// Some may have been delivered to this consumer: the
			// next read of the pending list finds them.
			a.redisError(ctx, redisOpResultsRead, err)
			reread = true
		}
		rs, bad = append(rs, more...), append(bad, moreBad...)
	}
	if len(bad) > 0 {
		a.metrics.badMessages.WithLabelValues("results").Add(float64(len(bad)))
		a.log.WarnContext(ctx, "dropping undecodable results", "count", len(bad))
	}
	for len(rs) > 0 {
		n := wholeEntries(rs, a.cfg.ResultBatch)
		if err := a.apply(ctx, a.allowed(rs[:n])); err != nil {
			a.storeError(ctx, storeOpApplyResults, err)
			_ = retry.Sleep(ctx, 200*time.Millisecond)
			return false, true // not acknowledged: read them again
		}
		a.ackLater(ctx, entryIDs(rs[:n], nil))
		rs = rs[n:]
	}
	a.ackLater(ctx, entryIDs(nil, bad))
	return true, reread
}

// ackLater acknowledges applied (or dropped) entries while the applier
// reads and applies the next ones, one acknowledgement at a time: the
// round trip to Redis is then off the loop's path, which matters when
// Redis is a network hop away (docs/scaling.md, "Distance"). Until it
// lands an applied entry only looks unapplied (the reaper waits a tick
// longer before releasing a stopped worker's jobs); if it fails, the
// entries come back and are rejected as stale, as they would after a
// failed synchronous one.
func (a *resultApplier) ackLater(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	_ = a.acking.start(func() error {
		// The entries are applied whatever happens to the loop now: its
		// stop or a lost leadership must not cancel their
		// acknowledgement (ack counts its own errors).
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
		defer cancel()
		a.ack(actx, ids)
		return nil
	})
}

// ack acknowledges applied (or dropped) entries of the stream.
func (a *resultApplier) ack(ctx context.Context, ids []string) {
	if err := a.queue.AckResults(ctx, ids); err != nil {
		// Applied but not acknowledged: they come back as stale.
		a.redisError(ctx, redisOpResultsAck, err)
	}
}

// wholeEntries returns how many of rs to apply in one batch: whole stream
// entries (the results of a batch entry are adjacent and share its id)
// adding up to at most max results, or the first entry if it alone holds
// more. An entry is acknowledged only once all its results are applied.
func wholeEntries(rs []queue.ReceivedResult, max int) int {
	n := 0
	for n < len(rs) {
		end := n + 1
		for end < len(rs) && rs[end].ID == rs[n].ID {
			end++
		}
		if n > 0 && end > max {
			break
		}
		n = end
	}
	return n
}

// entryIDs returns the ids of the entries of rs and of bad, each once.
// The results of an entry are adjacent in rs, so rs alone needs no sort
// (a read of a large fleet's small batches holds many entries); bad,
// rare, can repeat them.
func entryIDs(rs []queue.ReceivedResult, bad []string) []string {
	ids := make([]string, 0, len(rs)+len(bad))
	for i := range rs {
		if i == 0 || rs[i].ID != rs[i-1].ID {
			ids = append(ids, rs[i].ID)
		}
	}
	if len(bad) == 0 {
		return ids
	}
	ids = append(ids, bad...)
	slices.Sort(ids)
	return slices.Compact(ids)
}

// linger waits for lingerFor unless due jobs wait for slots, and stops
// waiting as soon as they start to; it reports whether the caller should
// read what came meanwhile (false: no wait, or ctx ended).
func (a *resultApplier) linger(ctx context.Context) bool {
	if a.l.slots.bound.Load() {
		return false
	}
	t := time.NewTimer(cmp.Or(a.lingerFor, defaultResultLinger))
	defer t.Stop()
	select {
	case a.lingering <- struct{}{}: // nil: never ready
	default:
	}
	select {
	case <-t.C:
		return true
	case <-a.l.slots.became:
		return true // read what came so far: it frees slots too
	case <-ctx.Done():
		return false
	}
}

// apply records one batch. If PostgreSQL refuses the data of a write of
// it (nothing was written), each result is applied alone, so that only the
// refused one fails; a completion refused alone becomes a failed attempt.
func (a *resultApplier) apply(ctx context.Context, rs []queue.ReceivedResult) error {
	if err := a.storeLogs(ctx, rs); err != nil {
		return err
	}
	err := a.applyBatch(ctx, rs)
	if !poison(err) {
		return err
	}
	if len(rs) > 1 {
		a.log.WarnContext(ctx, "postgres refused the data of a batch of results; applying them one by one",
			"count", len(rs), "error", err)
	}
	for _, r := range rs {
		if len(rs) > 1 {
			err = a.applyBatch(ctx, []queue.ReceivedResult{r})
		}
		if poison(err) && r.Result.Outcome == wire.OutcomeCompleted {
			r.Result = invalidResult(r.Result, fmt.Sprintf("result refused by PostgreSQL: %v", err))
			err = a.applyBatch(ctx, []queue.ReceivedResult{r})
		}
		if poison(err) {
			// Nothing this result says can be stored; its lease will run
			// out and the attempt be retried. Dropping it (it is
			// acknowledged with the batch) keeps everything else moving.
			a.metrics.badMessages.WithLabelValues("results").Inc()
			a.log.ErrorContext(ctx, "dropping a result postgres refuses", "job_id", r.Result.JobID,
				"worker_id", r.Result.WorkerID, "error", err)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// poison reports whether PostgreSQL refused a write for the data it
// carried (job.ErrBadData): it wrote nothing, and the same write would be
// refused again. Every other error is retried by persist.
func poison(err error) bool {
	return errors.Is(err, job.ErrBadData) && !errors.Is(err, job.ErrDeposed)
}

// Waits between tries of a result write that failed for a reason other
// than its data: the first, doubling up to the last, each cut by a random
// part of up to half, so that retries of statements that failed together
// (a deadlock's, a restart's) do not meet again in step. The last bounds
// how long after a fault clears the results wait.
const (
	resultRetryFirst = 50 * time.Millisecond
	resultRetryMax   = 5 * time.Second
)

// persist runs write until it succeeds, PostgreSQL refuses the data it
// carries (poison: the caller finds the result at fault), the leader is
// deposed, or ctx ends. Any other error (PostgreSQL away, a lock or
// statement timeout, a cancel, a deadlock, a serialization failure,
// resources short, and errors of the schema or the server) says nothing
// about the results, so it must not change their jobs' outcome: each is
// counted and logged, and the same write is tried again after a jittered
// backoff, for as long as the fault lasts. Meanwhile the batch stays
// unacknowledged in the stream, and the reaper ends no lease until the
// applier has caught up with the stream (leaderState.resultsStuck): the
// leases of these results, and of those queued behind them, may run out,
// as their workers name the jobs no more.
func persist[T any](ctx context.Context, a *resultApplier, write func() (T, error)) (T, error) {
	wait := resultRetryFirst
	for {
		v, err := write()
		if err == nil || poison(err) || store.IsDeposed(err) || ctx.Err() != nil {
			return v, err
		}
		a.l.resultsStuck.Store(true)
		a.storeError(ctx, storeOpApplyResults, err)
		if retry.Sleep(ctx, jitter(wait)) != nil {
			return v, err
		}
		wait = min(2*wait, resultRetryMax)
	}
}

// jitter returns a random duration between d/2 and d.
func jitter(d time.Duration) time.Duration { return d - rand.N(d/2+1) }

// invalidResult turns a completion whose result cannot be stored into a
// failed attempt that says why.
func invalidResult(r wire.Result, why string) wire.Result {
	r.Outcome, r.Result, r.Reason, r.Error = wire.OutcomeFailed, nil, job.ReasonInvalidResult, why
	return r
}

// applyBatch records one batch of outcomes: completions in one statement,
// failures in one transaction, releases in one statement, and progress
// reports in one statement (the latest per lease of the batch: a report is
// a running attempt's, so it ends nothing and frees no slot).
func (a *resultApplier) applyBatch(ctx context.Context, rs []queue.ReceivedResult) error {
	var (
		completions []store.Completion
		failures    []store.Failure
		releases    []store.Release
		progress    []store.Progress
	)
	rs, latest := splitProgress(rs)
	for _, r := range latest {
		if r.Logs != nil && r.Progress == 0 && r.Message == "" {
			continue // it carries lines only (logs.go), stored already
		}
		progress = append(progress, store.Progress{ID: r.JobID, LeaseToken: r.LeaseToken, WorkerID: r.WorkerID,
			Percent: r.Progress, Message: r.Message})
	}
	if _, err := persist(ctx, a, func() (int, error) { return a.store.JobProgressMany(ctx, a.l.epoch, progress) }); err != nil {
		return err
	}
	if len(rs) == 0 {
		return nil
	}
	a.metrics.resultBatch.Observe(float64(len(rs)))
	start, traced := time.Now(), a.tracedOf(rs)
	byID := make(map[int64]wire.Result, len(rs))
	for i := range rs {
		r := rs[i].Result
		if r.Outcome == wire.OutcomeCompleted && len(r.Result) > 0 {
			norm, err := job.NormalizeJSON(r.Result, maxResultBytes)
			if err != nil {
				r = invalidResult(r, "the handler's result "+err.Error())
			} else {
				r.Result = norm
			}
		}
		byID[r.JobID] = r
		switch r.Outcome {
		case wire.OutcomeCompleted:
			completions = append(completions, store.Completion{ID: r.JobID, LeaseToken: r.LeaseToken, WorkerID: r.WorkerID,
				Result: r.Result, StartedAt: r.StartedAt})
		case wire.OutcomeFailed:
			reason := r.Reason
			if reason == "" {
				reason = job.ReasonError
			}
			failures = append(failures, store.Failure{ID: r.JobID, LeaseToken: r.LeaseToken, WorkerID: r.WorkerID, Error: r.Error,
				Reason: reason, Permanent: reason == job.ReasonPermanent, StartedAt: r.StartedAt})
		case wire.OutcomeReleased:
			releases = append(releases, store.Release{ID: r.JobID, LeaseToken: r.LeaseToken, WorkerID: r.WorkerID})
		}
	}
	done, err := persist(ctx, a, func() ([]store.Finished, error) {
		return a.store.JobCompleteMany(ctx, a.l.epoch, completions)
	})
	if err != nil {
		return err
	}
	failed, err := persist(ctx, a, func() ([]store.FailOutcome, error) {
		return a.store.JobFailMany(ctx, a.l.epoch, failures, a.retry)
	})
	if err != nil {
		return err
	}
	released, err := persist(ctx, a, func() ([]int64, error) {
		return a.store.JobReleaseMany(ctx, a.l.epoch, releases)
	})
	if err != nil {
		return err
	}
	applied := len(done) + len(failed) + len(released)
	if stale := len(rs) - applied; stale > 0 {
		a.metrics.staleResults.Add(float64(stale))
		a.recordStale(ctx, staleOf(rs, done, failed, released))
	}
	for _, rr := range rs {
		a.l.workers.Done(rr.Result.JobID, rr.Result.LeaseToken)
	}
	debug := a.log.Enabled(ctx, slog.LevelDebug)
	types := typeMetricsCache{b: &a.base}
	if len(done) > 0 {
		a.metrics.jobsTotal.WithLabelValues("completed").Add(float64(len(done)))
	}
	for _, f := range done {
		r := byID[f.ID]
		if debug {
			a.log.DebugContext(ctx, "job completed", "job_id", f.ID, "worker_id", r.WorkerID, "attempt", r.Attempt)
		}
		m := types.get(f.Name)
		m.succeeded.Inc()
		tp := traced[f.ID]
		m.observeAttempt(r, f.CreatedAt, tp)
		observe(m.endToEnd, r.FinishedAt.Sub(f.CreatedAt).Seconds(), tp)
		if tp != "" {
			traceApplied(tp, &r, start, "completed")
		}
	}
	for _, o := range failed {
		r := byID[o.ID]
		m := types.get(o.Name)
		m.failed.Inc()
		tp := traced[o.ID]
		m.observeAttempt(r, o.CreatedAt, tp)
		if tp != "" {
			traceApplied(tp, &r, start, string(o.State))
		}
		if r.Reason == job.ReasonTimeout {
			a.metrics.jobsTotal.WithLabelValues("timeout").Inc()
		}
		a.log.InfoContext(ctx, "attempt failed", "job_id", o.ID, "attempt", o.Attempts, "worker_id", r.WorkerID,
			"reason", r.Reason, "error", o.Error, "next_state", o.State, "retry_in_ms", o.Delay.Milliseconds())
	}
	for range released {
		a.metrics.attempts.WithLabelValues("other", "released").Inc()
	}
	afterFailures(ctx, &a.base, a.queue, failed)
	if applied > 0 {
		a.l.wake()
	}
	return nil
}

// splitProgress takes the progress reports out of rs and returns the rest,
// in order, and the latest report of each lease (stream order is the order
// a worker sent them in).
func splitProgress(rs []queue.ReceivedResult) ([]queue.ReceivedResult, []wire.Result) {
	if !slices.ContainsFunc(rs, func(rr queue.ReceivedResult) bool { return rr.Result.Outcome == wire.OutcomeProgress }) {
		return rs, nil // the common case: no copy
	}
	type lease struct{ job, token int64 }
	var latest []wire.Result
	at := map[lease]int{}
	rest := make([]queue.ReceivedResult, 0, len(rs))
	for _, rr := range rs {
		r := rr.Result
		if r.Outcome != wire.OutcomeProgress {
			rest = append(rest, rr)
			continue
		}
		k := lease{r.JobID, r.LeaseToken}
		if i, ok := at[k]; ok {
			latest[i] = r
			continue
		}
		at[k] = len(latest)
		latest = append(latest, r)
	}
	return rest, latest
}

// staleOf returns the results of rs that were not applied: rejected
// because their lease was gone (or never their sender's), or repeated in
// the batch. An applied completion or failure accounts for one result of
// its lease (job and token), an applied release for one of its job.
func staleOf(rs []queue.ReceivedResult, done []store.Finished, failed []store.FailOutcome, released []int64) []wire.Result {
	type lease struct{ job, token int64 }
	applied := make(map[lease]int, len(done)+len(failed))
	for _, f := range done {
		applied[lease{f.ID, f.LeaseToken}]++
	}
	for _, o := range failed {
		applied[lease{o.ID, o.LeaseToken}]++
	}
	releasedJobs := make(map[int64]int, len(released))
	for _, id := range released {
		releasedJobs[id]++
	}
	var out []wire.Result
	for _, rr := range rs {
		r := rr.Result
		k := lease{r.JobID, r.LeaseToken}
		switch {
		case r.Outcome != wire.OutcomeReleased && applied[k] > 0:
			applied[k]--
		case r.Outcome == wire.OutcomeReleased && releasedJobs[r.JobID] > 0:
			releasedJobs[r.JobID]--
		default:
			out = append(out, r)
		}
	}
	return out
}

// recordStale logs each stale result and records the first
// store.MaxStaleEventsPerBatch of them on their jobs' timelines (the
// others are only counted, in dts_stale_results_total: a worker that
// floods the stream writes no more rows for it). The record is best
// effort: the batch is applied already, and a failure to record is
// counted and logged, not retried.
func (a *resultApplier) recordStale(ctx context.Context, stale []wire.Result) {
	evs := make([]store.StaleResult, 0, min(len(stale), store.MaxStaleEventsPerBatch))
	for _, r := range stale {
		a.log.InfoContext(ctx, "rejected a stale result: its lease is gone or not this worker's", "job_id", r.JobID,
			"worker_id", r.WorkerID, "attempt", r.Attempt, "outcome", r.Outcome)
		if len(evs) < store.MaxStaleEventsPerBatch {
			evs = append(evs, store.StaleResult{ID: r.JobID, LeaseToken: r.LeaseToken, WorkerID: r.WorkerID,
				Attempt: r.Attempt, Outcome: r.Outcome})
		}
	}
	if _, err := a.store.JobEventInsertStale(ctx, a.l.epoch, evs); err != nil {
		a.storeError(ctx, storeOpStaleEvents, err)
	}
}

// typeMetrics is one job type's label and metrics of the result
// applier.
type typeMetrics struct {
	succeeded, failed               prometheus.Counter
	processing, queueWait, endToEnd prometheus.Observer
}

// typeMetricsCache looks each job type's metrics up once per batch:
// per result, the label check and the lookups were a twentieth of the
// leader's CPU under load.
type typeMetricsCache struct {
	b *base
	m map[string]*typeMetrics
}

func (c *typeMetricsCache) get(name string) *typeMetrics {
	if m, ok := c.m[name]; ok {
		return m
	}
	label, mx := c.b.typeLabel(name), c.b.metrics
	m := &typeMetrics{
		succeeded: mx.attempts.WithLabelValues(label, "succeeded"), failed: mx.attempts.WithLabelValues(label, "failed"),
		processing: mx.processing.WithLabelValues(label), queueWait: mx.queueWait.WithLabelValues(label),
		endToEnd: mx.endToEnd.WithLabelValues(label),
	}
	if c.m == nil {
		c.m = map[string]*typeMetrics{}
	}
	c.m[name] = m
	return m
}

// observeAttempt records an attempt's run time and, for a first attempt, its
// queue wait.
// A traced job's trace id goes with them as the exemplar.
func (m *typeMetrics) observeAttempt(r wire.Result, created time.Time, traceparent string) {
	if !r.StartedAt.IsZero() && !r.FinishedAt.IsZero() {
		observe(m.processing, r.FinishedAt.Sub(r.StartedAt).Seconds(), traceparent)
		if r.Attempt == 1 {
			observe(m.queueWait, max(r.StartedAt.Sub(created).Seconds(), 0), traceparent)
		}
	}
}

// deadPusher is where afterFailures mirrors dead jobs.
type deadPusher interface {
	PushDead(ctx context.Context, es []wire.DeadEntry) error
}

// afterFailures updates retry metrics and pushes dead jobs to the Redis
// dead-letter list, ids and metadata only (best effort: the mirror check
// repairs a miss).
func afterFailures(ctx context.Context, b *base, q deadPusher, outs []store.FailOutcome) {
	var dead []wire.DeadEntry
	for _, o := range outs {
		switch o.State {
		case job.StateFailed:
			b.metrics.jobsTotal.WithLabelValues("failed").Inc()
			b.metrics.deadLettered.Inc()
			b.metrics.retryAttempts.WithLabelValues(o.Reason).Observe(float64(o.Attempts))
			dead = append(dead, deadEntry(store.DeadMeta{ID: o.ID, Name: o.Name, Queue: o.Queue, Attempts: o.Attempts,
				MaxRetries: o.MaxRetries, LastError: o.Error, Reason: o.Reason, CreatedAt: o.CreatedAt, FinishedAt: time.Now()}))
			b.log.WarnContext(ctx, "job moved to the dead-letter queue", "job_id", o.ID, "worker_id", o.WorkerID, "attempt", o.Attempts, "reason", o.Reason)
		case job.StateRetrying:
			b.metrics.retryAttempts.WithLabelValues(retryReason(o.Reason)).Observe(float64(o.Attempts))
		}
	}
	if err := q.PushDead(ctx, dead); err != nil {
		b.redisError(ctx, redisOpDLQPush, err)
	}
}

// retryReason maps an attempt's reason to the job_retry_attempts label.
func retryReason(reason string) string {
	switch reason {
	case job.ReasonWorkerFailure, job.ReasonLeaseTimeout, job.ReasonTimeout:
		return reason
	}
	return "job_error"
}

// maxDeadEntryError bounds the error an entry of the Redis mirror carries.
const maxDeadEntryError = 512

// deadEntry is the Redis mirror's entry for a dead job: ids and metadata.
func deadEntry(d store.DeadMeta) wire.DeadEntry {
	msg := []rune(d.LastError)
	if len(msg) > maxDeadEntryError {
		msg = msg[:maxDeadEntryError]
	}
	return wire.DeadEntry{
		JobID: d.ID, Reason: d.Reason, FailedAt: d.FinishedAt,
		OriginalJob: wire.DeadJob{JobID: d.ID, Name: d.Name, Queue: d.Queue, Attempts: d.Attempts,
			MaxRetries: d.MaxRetries, LastError: string(msg), CreatedAt: d.CreatedAt},
	}
}
