package app

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/startstop"
	"github.com/dtsched/dts/internal/store"
)

// insertBatcher turns concurrent single-job submissions into multi-row
// INSERTs, the way PostgreSQL's group commit shares one WAL flush among
// concurrent commits. A few inserts run at a time (flushers); a submission
// that arrives while all of them are busy waits for the first to finish
// and then goes in with every other submission that queued meanwhile. An
// idle submitter inserts a submission at once, so this adds no delay; a
// busy one pays one statement and one commit for many submissions instead
// of one each: with one INSERT per submission, the pool's few connections
// cap single submits far below what the database commits in batches
// (docs/benchmarks.md).
//
// What must stay true:
//   - A submission is answered only after the statement holding its row
//     has committed (or failed).
//   - One bad row fails alone: when PostgreSQL refuses a statement of
//     several rows (job.ErrRefused: it wrote nothing), each row is
//     inserted again by itself. Any other error (a lost connection, after
//     which the commit may have happened) is every row's answer, since
//     inserting again could create a job twice. So the insert must never
//     return job.ErrRefused once it has committed: store.JobInsert looks
//     up idempotency keys inside the INSERT's transaction.
//   - Whole batches from POST /submit_jobs never go through here: they
//     are all or nothing by themselves and already one statement.
//   - Unique submissions (unique_for) never share a statement with the
//     others: theirs runs in a transaction with the claims (store,
//     unique.go), and a job without unique_for keeps its one statement.
//     A batch holding both runs the two statements at once.
type insertBatcher struct {
	insert   func(context.Context, []store.JobInsertParams) ([]store.JobInsertResult, error)
	reqs     chan insertReq
	max      int           // most rows per statement
	timeout  time.Duration // bounds each statement
	flushers []startstop.Loop
	rows     func(n int) // observes the rows of each statement (metrics); may be nil

	mu       sync.Mutex
	stopping chan struct{} // made by Start, closed by Stop; nil before Start
}

type insertReq struct {
	ctx    context.Context
	params store.JobInsertParams
	done   chan insertDone // capacity 1: a flusher never waits on a caller
}

type insertDone struct {
	res store.JobInsertResult
	err error
}

// insertFlushers is how many coalesced INSERTs run at once. Two keep the
// latency of a lone submission at one statement while the other commits;
// more would only make each statement smaller.
const insertFlushers = 2

// maxInsertRows bounds the rows of one coalesced INSERT: the API's batch
// limit, a statement PostgreSQL handles in a few milliseconds.
const maxInsertRows = 1000

// insertTimeout bounds one coalesced INSERT. It runs on behalf of several
// requests, so no single request's context may cancel it.
const insertTimeout = 30 * time.Second

func newInsertBatcher(insert func(context.Context, []store.JobInsertParams) ([]store.JobInsertResult, error),
	flushers, max int, timeout time.Duration, rows func(int)) *insertBatcher {
	return &insertBatcher{insert: insert, reqs: make(chan insertReq), max: max, timeout: timeout,
		flushers: make([]startstop.Loop, flushers), rows: rows}
}

// Start starts the flushers.
func (b *insertBatcher) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopping != nil {
		select {
		case <-b.stopping:
		default:
			return nil // running
		}
	}
	b.stopping = make(chan struct{})
	for i := range b.flushers {
		b.flushers[i].StartLoop(ctx, b.run)
	}
	return nil
}

// Stop stops the flushers once the inserts they run have finished. Call it
// after the HTTP server has shut down; Insert fails until the next Start.
func (b *insertBatcher) Stop() {
	b.mu.Lock()
	if b.stopping != nil {
		select {
		case <-b.stopping:
		default:
			close(b.stopping)
		}
	}
	b.mu.Unlock()
	for i := range b.flushers {
		b.flushers[i].Stop()
	}
}

var errInsertsStopped = errors.New("submitter is not running: inserts are stopped")

// Insert inserts one job, with others that arrive meanwhile, and returns
// its result. If ctx ends first it returns ctx's error; the job may still
// be inserted, as when a client hangs up just after a commit.
func (b *insertBatcher) Insert(ctx context.Context, p store.JobInsertParams) (store.JobInsertResult, error) {
	b.mu.Lock()
	stopping := b.stopping
	b.mu.Unlock()
	if stopping == nil {
		return store.JobInsertResult{}, errInsertsStopped
	}
	done := make(chan insertDone, 1)
	select {
	case b.reqs <- insertReq{ctx: ctx, params: p, done: done}:
	case <-ctx.Done():
		return store.JobInsertResult{}, ctx.Err()
	case <-stopping:
		return store.JobInsertResult{}, errInsertsStopped
	}
	select {
	case d := <-done:
		return d.res, d.err
	case <-ctx.Done():
		return store.JobInsertResult{}, ctx.Err()
	}
}

func (b *insertBatcher) run(ctx context.Context) {
	batch := make([]insertReq, 0, b.max)
	for {
		batch = batch[:0]
		select {
		case r := <-b.reqs:
			batch = append(batch, r)
		case <-ctx.Done():
			return
		}
	fill: // everyone who queued while this flusher was busy
		for len(batch) < b.max {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		b.flush(batch)
	}
}

// flush inserts batch and answers each request: in one statement, or two
// run at once when it mixes unique submissions with others.
func (b *insertBatcher) flush(batch []insertReq) {
	var plain, unique []insertReq
	for _, r := range batch {
		if r.params.Unique != nil {
			unique = append(unique, r)
		} else {
			plain = append(plain, r)
		}
	}
	if len(plain) == 0 || len(unique) == 0 {
		b.flushOne(batch)
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { b.flushOne(unique) })
	b.flushOne(plain)
	wg.Wait()
}

// flushOne inserts batch in one statement and answers each request.
func (b *insertBatcher) flushOne(batch []insertReq) {
	live := make([]insertReq, 0, len(batch))
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil { // its client left before the insert: skip it
			r.done <- insertDone{err: err}
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	ps := make([]store.JobInsertParams, len(live))
	for i, r := range live {
		ps[i] = r.params
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	res, err := b.insert(ctx, ps)
	cancel()
	if err != nil && len(live) > 1 && errors.Is(err, job.ErrRefused) {
		for _, r := range live {
			b.flushOne([]insertReq{r})
		}
		return
	}
	if b.rows != nil && err == nil {
		b.rows(len(live))
	}
	for i, r := range live {
		if err != nil {
			r.done <- insertDone{err: err}
			continue
		}
		r.done <- insertDone{res: res[i]}
	}
}
