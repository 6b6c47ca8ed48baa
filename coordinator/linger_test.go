package coordinator

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// sizeLog records the sizes of statements, for the store wrappers below
// (safe for concurrent use).
type sizeLog struct {
	mu    sync.Mutex
	sizes []int
}

func (l *sizeLog) add(n int) {
	l.mu.Lock()
	l.sizes = append(l.sizes, n)
	l.mu.Unlock()
}

func (l *sizeLog) got() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sizes)
}

// completeCounter records the size of each completion statement.
type completeCounter struct {
	*store.Store
	sizeLog
}

func (c *completeCounter) JobCompleteMany(ctx context.Context, epoch int64, cs []store.Completion) ([]store.Finished, error) {
	if len(cs) > 0 {
		c.add(len(cs))
	}
	return c.Store.JobCompleteMany(ctx, epoch, cs)
}

// TestResultsLingerOnlyWhileSlotsAreFree: while no due job waits for a
// slot, a small read of results waits for more and applies them in one
// statement; once the dispatcher says jobs wait for slots, the wait ends
// at once and every later read is applied as it comes; a read of
// lingerBelow results or more never waits. The linger here is an hour, so
// any result applied in this test was applied without waiting it out.
func TestResultsLingerOnlyWhileSlotsAreFree(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(4+lingerBelow, "w")
	counter := &completeCounter{Store: r.store}
	lingering := make(chan struct{}, 1)
	a := r.results()
	a.store, a.lingerFor, a.lingering = counter, time.Hour, lingering
	r.start(a)
	waitLinger := func() {
		t.Helper()
		select {
		case <-lingering:
		case <-time.After(10 * time.Second):
			t.Fatal("the applier never lingered")
		}
	}

	// Slots free: the first result is read, and waits.
	r.sendResults(completed(cs[0], `0`))
	waitLinger()
	if st := r.states(cs[:1]); st[cs[0].ID] != "leased" {
		t.Fatalf("a lone result while slots are free was applied at once: %v", st)
	}
	r.sendResults(completed(cs[1], `1`))
	// Jobs now wait for slots: the wait ends, and both go in one statement.
	r.b.l.slots.set(true)
	testwait.For(t, 10*time.Second, "both results applied", func() bool { return allIn(r.states(cs[:2]), "completed") })
	if got := counter.got(); !slices.Equal(got, []int{2}) {
		t.Fatalf("completion statements = %v; want one of 2", got)
	}

	// While jobs wait for slots, a lone result is applied as it comes.
	r.sendResults(completed(cs[2], `2`))
	testwait.For(t, 10*time.Second, "the third result applied", func() bool { return allIn(r.states(cs[2:3]), "completed") })
	if got := counter.got(); !slices.Equal(got, []int{2, 1}) {
		t.Fatalf("completion statements = %v; want 2, then 1", got)
	}

	// Slots free again: a read of lingerBelow results does not wait. They
	// are added in one transaction, so that the blocked reader gets them
	// in one read.
	r.b.l.slots.set(false)
	pipe := r.rdb.TxPipeline()
	for _, c := range cs[4:] {
		b, _ := json.Marshal(completed(c, `3`))
		pipe.XAdd(r.ctx, &redis.XAddArgs{Stream: r.keys.Results(), Values: []any{"r", b}})
	}
	if _, err := pipe.Exec(r.ctx); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "a full read applied", func() bool { return allIn(r.states(cs[4:]), "completed") })
	if got := counter.got(); !slices.Equal(got, []int{2, 1, lingerBelow}) {
		t.Fatalf("completion statements = %v; want 2, 1, then %d", got, lingerBelow)
	}

	// And a lone one waits again.
	r.sendResults(completed(cs[3], `4`))
	waitLinger()
	if st := r.states(cs[3:4]); st[cs[3].ID] != "leased" {
		t.Fatalf("a lone result while slots are free was applied at once: %v", st)
	}
}

// TestDispatchSaysWhetherJobsWaitForSlots: a round that fills every slot
// it offers says jobs wait for slots (and ends a linger: became); one that
// finds fewer due jobs than free slots says they do not; one with no free
// slot says they do.
func TestDispatchSaysWhetherJobsWaitForSlots(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	insert := func(n int) {
		ps := make([]store.JobInsertParams, n)
		for i := range ps {
			ps[i] = store.JobInsertParams{Name: "x", Payload: json.RawMessage(`null`)}
		}
		if _, err := r.store.JobInsert(r.ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	d := &dispatcher{base: r.b, store: r.store, queue: r.queue}
	round := func() bool {
		t.Helper()
		if _, err := d.roundDelivered(r.ctx, scopeAll); err != nil {
			t.Fatal(err)
		}
		return r.b.l.slots.bound.Load()
	}
	r.b.l.workers.Heartbeat(wire.Heartbeat{WorkerID: "w", JobTypes: []string{"*"}, Concurrency: 3}, time.Now())

	insert(1)
	if round() {
		t.Error("1 due job and 3 free slots: says jobs wait for slots")
	}
	insert(5)
	if !round() {
		t.Error("5 due jobs and 2 free slots: says no job waits for a slot")
	}
	select {
	case <-r.b.l.slots.became:
	default:
		t.Error("turning bound did not signal became")
	}
	if !round() {
		t.Error("no free slot: says no job waits for a slot")
	}
}

// TestResultBatchEntries: the results of a batch entry are applied
// together and the entry acknowledged once: a batch of results is whole
// entries of at most ResultBatch results, or one entry larger than that.
func TestResultBatchEntries(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.b.cfg.ResultBatch = 3
	cs := r.insertLeased(7, "w")
	counter := &completeCounter{Store: r.store}
	a := r.results()
	a.store = counter
	var batch []wire.Result
	for _, c := range cs[:5] {
		batch = append(batch, completed(c, `1`))
	}
	pipe := r.rdb.TxPipeline()
	pipe.XAdd(r.ctx, &redis.XAddArgs{Stream: r.keys.Results(), Values: []any{"b", wire.AppendResultBatch(nil, batch)}})
	for _, c := range cs[5:] {
		b, _ := json.Marshal(completed(c, `2`))
		pipe.XAdd(r.ctx, &redis.XAddArgs{Stream: r.keys.Results(), Values: []any{"r", b}})
	}
	if _, err := pipe.Exec(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.b.l.slots.set(true) // no linger: the read is what the test looks at
	r.start(a)
	testwait.For(t, 10*time.Second, "every result applied", func() bool { return allIn(r.states(cs), "completed") })
	if got := counter.got(); !slices.Equal(got, []int{5, 2}) {
		t.Errorf("completion statements = %v; want the batch's 5, then the 2 single entries", got)
	}
	testwait.For(t, 10*time.Second, "the entries acknowledged", func() bool {
		n, _ := r.rdb.XLen(r.ctx, r.keys.Results()).Result()
		return n == 0
	})
}

func TestWholeEntries(t *testing.T) {
	rs := func(ids ...string) []queue.ReceivedResult {
		out := make([]queue.ReceivedResult, len(ids))
		for i, id := range ids {
			out[i].ID = id
		}
		return out
	}
	for _, c := range []struct {
		ids  []string
		max  int
		want int
	}{
		{[]string{"a", "b", "c"}, 2, 2},
		{[]string{"a", "a", "a", "b"}, 2, 3}, // one entry larger than max goes alone
		{[]string{"a", "b", "b", "c"}, 2, 1},
		{[]string{"a", "b", "b", "c"}, 3, 3},
		{[]string{"a", "a", "b"}, 10, 3},
	} {
		if got := wholeEntries(rs(c.ids...), c.max); got != c.want {
			t.Errorf("wholeEntries(%v, %d) = %d, want %d", c.ids, c.max, got, c.want)
		}
	}
}
