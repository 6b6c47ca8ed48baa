package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// env is a queue under a key prefix of its own, and a plain client for
// writing what the queue never would (undecodable entries) and for looking
// at keys directly.
type env struct {
	q    *queue.Queue
	rdb  *redis.Client
	keys queue.Keys
}

// newEnv opens a queue on the shared server under a fresh prefix.
func newEnv(t *testing.T) *env {
	t.Helper()
	prefix := redistest.Prefix(t)
	return openEnv(t, redistest.URL(), prefix)
}

func openEnv(t *testing.T, url, prefix string) *env {
	t.Helper()
	q, err := queue.Open(t.Context(), url, prefix)
	if err != nil {
		t.Fatalf("open queue: %v", err)
	}
	t.Cleanup(func() { _ = q.Close() })
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return &env{q: q, rdb: rdb, keys: q.Keys()}
}

var created = time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)

func delivery(id int64) wire.Delivery {
	return wire.Delivery{JobID: id, Name: "job", Queue: "default", Payload: json.RawMessage(fmt.Sprintf(`{"id":%d}`, id)),
		Attempt: 1, MaxRetries: 3, TimeoutSeconds: 5, LeaseToken: 1000 + id, CreatedAt: created}
}

// same compares values by their JSON encoding (times and raw messages
// compare by what they say, not by pointer or spacing).
func same(t *testing.T, got, want any) bool {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(g, w)
}

// outbox makes a Deliver argument, in one codec for every worker.
func outbox(codec int, m map[string][]wire.Delivery) map[string]queue.Outbox {
	out := map[string]queue.Outbox{}
	for id, ds := range m {
		out[id] = queue.Outbox{Deliveries: ds, Codec: codec}
	}
	return out
}

func (e *env) receive(t *testing.T, worker string, max int) queue.Inbox {
	t.Helper()
	in, err := e.q.Receive(t.Context(), worker, max, 0)
	if err != nil {
		t.Fatalf("receive for %s: %v", worker, err)
	}
	return in
}

func TestDeliverReceive(t *testing.T) {
	t.Parallel()
	for _, codec := range []int{wire.CodecJSON, wire.CodecBinary, wire.CodecBatch} {
		t.Run(fmt.Sprint("codec=", codec), func(t *testing.T) { testDeliverReceive(t, codec) })
	}
}

func testDeliverReceive(t *testing.T, codec int) {
	e := newEnv(t)
	ctx := t.Context()
	w1 := []wire.Delivery{delivery(1), delivery(2), delivery(3)}
	w2 := []wire.Delivery{delivery(4)}
	if err := e.q.Deliver(ctx, outbox(codec, map[string][]wire.Delivery{"w1": w1, "w2": w2})); err != nil {
		t.Fatalf("deliver: %v", err)
	}
	if err := e.q.Deliver(ctx, outbox(codec, map[string][]wire.Delivery{"w1": {delivery(5)}})); err != nil {
		t.Fatalf("deliver: %v", err)
	}
	// FIFO per worker, across Deliver calls, max at a time.
	in := e.receive(t, "w1", 2)
	if !same(t, in.Deliveries, w1[:2]) || len(in.Controls) != 0 || in.Bad != 0 {
		t.Errorf("first receive for w1 = %+v, want jobs 1 and 2", in)
	}
	in = e.receive(t, "w1", 10)
	if !same(t, in.Deliveries, []wire.Delivery{delivery(3), delivery(5)}) {
		t.Errorf("second receive for w1 = %+v, want jobs 3 and 5", in)
	}
	if in := e.receive(t, "w2", 10); !same(t, in.Deliveries, w2) {
		t.Errorf("receive for w2 = %+v, want job 4", in)
	}
	if in := e.receive(t, "w1", 10); len(in.Deliveries)+len(in.Controls)+in.Bad != 0 {
		t.Errorf("receive on empty lists = %+v", in)
	}
	if err := e.q.Deliver(ctx, nil); err != nil {
		t.Errorf("deliver nothing: %v", err)
	}
}

func TestReceiveControlFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	if err := e.q.Deliver(ctx, outbox(wire.CodecJSON, map[string][]wire.Delivery{"w": {delivery(1)}})); err != nil {
		t.Fatal(err)
	}
	c1 := wire.Control{Op: wire.OpCancel, JobID: 1, LeaseToken: 1001, Reason: "canceled"}
	c2 := wire.Control{Op: wire.OpCancel, JobID: 2, LeaseToken: 1002}
	for _, c := range []wire.Control{c1, c2} {
		if err := e.q.SendControl(ctx, "w", c); err != nil {
			t.Fatal(err)
		}
	}
	in := e.receive(t, "w", 10)
	if len(in.Deliveries) != 0 || !same(t, in.Controls, []wire.Control{c1, c2}) {
		t.Errorf("first receive = %+v, want both controls in order and no job", in)
	}
	in = e.receive(t, "w", 10)
	if len(in.Controls) != 0 || !same(t, in.Deliveries, []wire.Delivery{delivery(1)}) {
		t.Errorf("second receive = %+v, want the job", in)
	}
}

func TestReceiveBad(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	good, _ := json.Marshal(delivery(7))
	// LPUSH: the first value is popped first.
	for _, v := range []string{"not json", string(good), `{"job_id":0,"lease_token":1,"name":"x"}`, `{"job_id":1,"lease_token":1}`, `[]`} {
		if err := e.rdb.LPush(ctx, e.keys.WorkerJobs("w"), v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	in := e.receive(t, "w", 10)
	if in.Bad != 4 || !same(t, in.Deliveries, []wire.Delivery{delivery(7)}) {
		t.Errorf("receive = %+v, want one job and 4 bad", in)
	}
	if err := e.rdb.LPush(ctx, e.keys.WorkerControl("w"), "{", `{"op":"cancel","job_id":3,"lease_token":4}`).Err(); err != nil {
		t.Fatal(err)
	}
	in = e.receive(t, "w", 10)
	if in.Bad != 1 || len(in.Controls) != 1 || in.Controls[0].JobID != 3 {
		t.Errorf("receive = %+v, want one control and 1 bad", in)
	}
}

func TestReceiveBlocks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	got := make(chan queue.Inbox, 1)
	errc := make(chan error, 1)
	go func() {
		in, err := e.q.Receive(ctx, "w", 10, 5*time.Second)
		if err != nil {
			errc <- err
			return
		}
		got <- in
	}()
	// Delivered before or during the wait: the waiting Receive gets it either way.
	if err := e.q.Deliver(ctx, outbox(wire.CodecJSON, map[string][]wire.Delivery{"w": {delivery(1)}})); err != nil {
		t.Fatal(err)
	}
	select {
	case in := <-got:
		if !same(t, in.Deliveries, []wire.Delivery{delivery(1)}) {
			t.Errorf("blocking receive = %+v", in)
		}
	case err := <-errc:
		t.Fatalf("blocking receive: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("blocking receive did not return")
	}
}

func TestDropWorkerQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	if err := e.q.Deliver(ctx, outbox(wire.CodecJSON, map[string][]wire.Delivery{"gone": {delivery(1)}, "kept": {delivery(2)}})); err != nil {
		t.Fatal(err)
	}
	if err := e.q.SendControl(ctx, "gone", wire.Control{Op: wire.OpCancel, JobID: 1, LeaseToken: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.q.DropWorkerQueues(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if n := e.rdb.Exists(ctx, e.keys.WorkerJobs("gone"), e.keys.WorkerControl("gone")).Val(); n != 0 {
		t.Errorf("%d of the dropped worker's lists remain", n)
	}
	if in := e.receive(t, "kept", 10); len(in.Deliveries) != 1 {
		t.Errorf("other worker's list: %+v", in)
	}
}

// TestKeysUsePrefix: every key the queue writes is under its prefix.
func TestKeysUsePrefix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	if err := e.q.Deliver(ctx, outbox(wire.CodecJSON, map[string][]wire.Delivery{"w": {delivery(1)}})); err != nil {
		t.Fatal(err)
	}
	if err := e.q.SendControl(ctx, "w", wire.Control{Op: wire.OpCancel, JobID: 1, LeaseToken: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.q.SendResults(ctx, []wire.Result{result(1, wire.OutcomeCompleted)}); err != nil {
		t.Fatal(err)
	}
	if err := e.q.SendHeartbeat(ctx, heartbeat("w")); err != nil {
		t.Fatal(err)
	}
	if err := e.q.PushDead(ctx, []wire.DeadEntry{deadEntry(1)}); err != nil {
		t.Fatal(err)
	}
	prefix := e.keys.Prefix
	all, err := e.rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(all)
	want := []string{e.keys.DeadLetter(), e.keys.Heartbeats(), e.keys.Results(), e.keys.WorkerControl("w"), e.keys.WorkerJobs("w")}
	slices.Sort(want)
	if !slices.Equal(all, want) {
		t.Errorf("keys under %q = %v, want %v", prefix, all, want)
	}
}

func result(id int64, outcome string) wire.Result {
	r := wire.Result{JobID: id, LeaseToken: 1000 + id, WorkerID: "w", Attempt: 1, Outcome: outcome,
		StartedAt: created, FinishedAt: created.Add(time.Second)}
	switch outcome {
	case wire.OutcomeCompleted:
		r.Result = json.RawMessage(fmt.Sprintf(`{"n":%d}`, id))
	case wire.OutcomeFailed:
		r.Error, r.Reason = "boom", "error"
	}
	return r
}

func results(rs []queue.ReceivedResult) []wire.Result {
	out := make([]wire.Result, len(rs))
	for i, r := range rs {
		out[i] = r.Result
	}
	return out
}

func ids(rs []queue.ReceivedResult) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func (e *env) read(t *testing.T, pending bool) ([]queue.ReceivedResult, []string) {
	t.Helper()
	rs, bad, err := e.q.ReadResults(t.Context(), pending, 100, 50*time.Millisecond)
	if err != nil {
		t.Fatalf("read results (pending %v): %v", pending, err)
	}
	return rs, bad
}

func TestResultsAckAndRedelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	if err := e.q.EnsureResultsGroup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.q.EnsureResultsGroup(ctx); err != nil {
		t.Errorf("second EnsureResultsGroup: %v", err)
	}
	sent := []wire.Result{result(1, wire.OutcomeCompleted), result(2, wire.OutcomeFailed), result(3, wire.OutcomeReleased)}
	if err := e.q.SendResults(ctx, sent); err != nil {
		t.Fatal(err)
	}
	if err := e.q.SendResults(ctx, nil); err != nil {
		t.Errorf("send nothing: %v", err)
	}

	if rs, _ := e.read(t, true); len(rs) != 0 {
		t.Errorf("pending before any read = %+v", rs)
	}
	rs, bad := e.read(t, false)
	if !same(t, results(rs), sent) || len(bad) != 0 {
		t.Fatalf("read = %+v bad %v, want the three sent in order", rs, bad)
	}
	if again, _ := e.read(t, false); len(again) != 0 {
		t.Errorf("new results read twice: %+v", again)
	}
	// Not acknowledged: a reader (a restarted or new leader) sees them again.
	pend, _ := e.read(t, true)
	if !slices.Equal(ids(pend), ids(rs)) || !same(t, results(pend), sent) {
		t.Errorf("pending = %+v, want the three read", pend)
	}

	if err := e.q.AckResults(ctx, ids(rs)[:2]); err != nil {
		t.Fatal(err)
	}
	pend, _ = e.read(t, true)
	if !slices.Equal(ids(pend), ids(rs)[2:]) {
		t.Errorf("pending after ack of two = %v, want %v", ids(pend), ids(rs)[2:])
	}
	if err := e.q.AckResults(ctx, ids(rs)[2:]); err != nil {
		t.Fatal(err)
	}
	if pend, _ := e.read(t, true); len(pend) != 0 {
		t.Errorf("pending after ack of all = %+v", pend)
	}
	if n := e.rdb.XLen(ctx, e.keys.Results()).Val(); n != 0 {
		t.Errorf("%d entries left in the stream after ack, want 0 (ack deletes)", n)
	}
	if err := e.q.AckResults(ctx, nil); err != nil {
		t.Errorf("ack nothing: %v", err)
	}
}

// TestResultsBeforeGroup: results sent before the group exists are not
// lost, the group is created from the start of the stream.
func TestResultsBeforeGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sent := []wire.Result{result(1, wire.OutcomeCompleted), result(2, wire.OutcomeCompleted)}
	if err := e.q.SendResults(t.Context(), sent); err != nil {
		t.Fatal(err)
	}
	if rs, _ := e.read(t, false); !same(t, results(rs), sent) {
		t.Errorf("read = %+v, want both", rs)
	}
}

func TestResultsNoGroupAfterKeyLoss(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	if err := e.q.SendResults(ctx, []wire.Result{result(1, wire.OutcomeCompleted)}); err != nil {
		t.Fatal(err)
	}
	if rs, _ := e.read(t, false); len(rs) != 1 {
		t.Fatalf("read = %+v", rs)
	}

	// The stream and its group vanish (eviction, a flush of that key).
	if err := e.rdb.Del(ctx, e.keys.Results()).Err(); err != nil {
		t.Fatal(err)
	}
	for _, pending := range []bool{true, false} {
		if rs, bad := e.read(t, pending); len(rs)+len(bad) != 0 {
			t.Errorf("read (pending %v) of a lost stream = %+v %v", pending, rs, bad)
		}
	}
	if err := e.rdb.Del(ctx, e.keys.Results()).Err(); err != nil {
		t.Fatal(err)
	}
	// A worker's XADD recreates the stream without a group.
	r2 := result(2, wire.OutcomeFailed)
	if err := e.q.SendResults(ctx, []wire.Result{r2}); err != nil {
		t.Fatal(err)
	}
	rs, _ := e.read(t, false)
	if !same(t, results(rs), []wire.Result{r2}) {
		t.Errorf("read after the group was lost = %+v, want result 2", rs)
	}
}

func TestResultsAfterFlushAll(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	e := openEnv(t, srv.URL(), "")
	ctx := t.Context()
	if err := e.q.EnsureResultsGroup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.q.SendResults(ctx, []wire.Result{result(1, wire.OutcomeCompleted)}); err != nil {
		t.Fatal(err)
	}
	if rs, _ := e.read(t, false); len(rs) != 1 {
		t.Fatalf("read = %+v", rs)
	}
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r2 := result(2, wire.OutcomeCompleted)
	if err := e.q.SendResults(ctx, []wire.Result{r2}); err != nil {
		t.Fatal(err)
	}
	rs, _ := e.read(t, true)
	if len(rs) != 0 {
		t.Errorf("pending after flush = %+v", rs)
	}
	rs, _ = e.read(t, false)
	if !same(t, results(rs), []wire.Result{r2}) {
		t.Errorf("read after flush = %+v, want result 2", rs)
	}
	if err := e.q.AckResults(ctx, ids(rs)); err != nil {
		t.Fatal(err)
	}
}

func TestResultsBad(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	good := result(1, wire.OutcomeCompleted)
	add := func(field, value string) string {
		id, err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Results(), Values: []any{field, value}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	var wantBad []string
	wantBad = append(wantBad, add("r", "garbage"))
	if err := e.q.SendResults(ctx, []wire.Result{good}); err != nil {
		t.Fatal(err)
	}
	wantBad = append(wantBad, add("x", `{"job_id":1,"lease_token":1,"outcome":"completed"}`)) // wrong field
	wantBad = append(wantBad, add("r", `{"job_id":1,"lease_token":1,"outcome":"exploded"}`))
	wantBad = append(wantBad, add("r", `{"job_id":0,"lease_token":1,"outcome":"completed"}`))

	rs, bad := e.read(t, false)
	if !same(t, results(rs), []wire.Result{good}) {
		t.Errorf("read = %+v, want the good result", rs)
	}
	if !slices.Equal(bad, wantBad) {
		t.Errorf("bad = %v, want %v", bad, wantBad)
	}
	// Bad entries stay pending until acknowledged like any other.
	if _, pbad := e.read(t, true); !slices.Equal(pbad, wantBad) {
		t.Errorf("pending bad = %v, want %v", pbad, wantBad)
	}
	if err := e.q.AckResults(ctx, append(bad, ids(rs)...)); err != nil {
		t.Fatal(err)
	}
	if rs, bad := e.read(t, true); len(rs)+len(bad) != 0 {
		t.Errorf("after ack: %+v %v", rs, bad)
	}
}

// TestReadNoBlock: a zero block returns at once instead of blocking forever
// (go-redis sends BLOCK 0, "wait forever", for a zero duration).
func TestReadNoBlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	done := make(chan error, 2)
	go func() {
		_, err := e.q.ReadHeartbeats(ctx, "0-0", 10, 0)
		done <- err
	}()
	go func() {
		_, _, err := e.q.ReadResults(ctx, false, 10, 0)
		done <- err
	}()
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("read with no block: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a read with block 0 still waits after 5s")
		}
	}
}

func heartbeat(id string) wire.Heartbeat {
	return wire.Heartbeat{WorkerID: id, JobTypes: []string{"*"}, Concurrency: 2,
		InFlight: []wire.InFlight{{JobID: 1, LeaseToken: 2}}, SentAt: created}
}

// readHB is ReadHeartbeats with its parts apart.
func readHB(ctx context.Context, q *queue.Queue, after string, max int) ([]queue.ReceivedHeartbeat, string, int, error) {
	r, err := q.ReadHeartbeats(ctx, after, max, 20*time.Millisecond)
	return r.Heartbeats, r.Last, r.Bad, err
}

func TestHeartbeats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	last, err := e.q.LastHeartbeatID(ctx)
	if err != nil || last != "0-0" {
		t.Fatalf("last id of an empty stream = %q, %v; want 0-0", last, err)
	}
	if hbs, after, bad, err := readHB(ctx, e.q, last, 10); err != nil || len(hbs) != 0 || bad != 0 || after != last {
		t.Errorf("read of an empty stream = %+v %q %d %v", hbs, after, bad, err)
	}
	h1, h2 := heartbeat("a"), heartbeat("b")
	h2.Draining = true
	for _, hb := range []wire.Heartbeat{h1, h2} {
		if err := e.q.SendHeartbeat(ctx, hb); err != nil {
			t.Fatal(err)
		}
	}
	mark, err := e.q.LastHeartbeatID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hbs, after, bad, err := readHB(ctx, e.q, "0-0", 10)
	if err != nil || bad != 0 || len(hbs) != 2 || !same(t, []wire.Heartbeat{hbs[0].Heartbeat, hbs[1].Heartbeat}, []wire.Heartbeat{h1, h2}) {
		t.Fatalf("read all = %+v bad %d err %v", hbs, bad, err)
	}
	if after != mark || hbs[1].ID != mark {
		t.Errorf("read all ended at %q (last entry %q), want %q", after, hbs[1].ID, mark)
	}

	// After the mark: only newer heartbeats; undecodable ones are counted
	// and still move the cursor.
	h3 := heartbeat("c")
	if err := e.q.SendHeartbeat(ctx, h3); err != nil {
		t.Fatal(err)
	}
	if err := e.q.SendHeartbeat(ctx, wire.Heartbeat{WorkerID: "zero-concurrency"}); err != nil {
		t.Fatal(err)
	}
	junk, err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Heartbeats(), Values: []any{"h", "junk"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	hbs, after, bad, err = readHB(ctx, e.q, mark, 10)
	if err != nil || len(hbs) != 1 || !same(t, hbs[0].Heartbeat, h3) || bad != 2 {
		t.Errorf("read after mark = %+v bad %d err %v; want h3 and 2 bad", hbs, bad, err)
	}
	if after != junk {
		t.Errorf("cursor after read = %q, want the last entry %q", after, junk)
	}
	if last, _ := e.q.LastHeartbeatID(ctx); last != junk {
		t.Errorf("last id = %q, want %q", last, junk)
	}
	hbs, again, bad, err := readHB(ctx, e.q, after, 10)
	if err != nil || len(hbs) != 0 || bad != 0 || again != after {
		t.Errorf("read at the end = %+v %q %d %v", hbs, again, bad, err)
	}

	// max bounds a read.
	hbs, after, _, err = readHB(ctx, e.q, "0-0", 1)
	if err != nil || len(hbs) != 1 || after != hbs[0].ID {
		t.Errorf("read of 1 = %+v %q %v", hbs, after, err)
	}
}

func TestWake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	if err := e.q.Wake(ctx, wire.Wake{}); err != nil {
		t.Fatalf("wake with nobody listening: %v", err)
	}
	ch, stop := e.q.SubscribeWake(ctx)
	defer stop()

	// The subscription is set up in the background and wake-ups are best
	// effort: publish until one arrives.
	// awaitWake publishes wake-ups (limited or not) until one arrives, and
	// returns whether it was limited.
	awaitWake := func(what string, limited bool) (got bool) {
		t.Helper()
		testwait.For(t, 10*time.Second, "a wake-up "+what, func() bool {
			select {
			case w := <-ch:
				got = w.Limited
				return true
			default:
			}
			if err := e.q.Wake(ctx, wire.Wake{Limited: limited}); err != nil {
				t.Fatalf("wake: %v", err)
			}
			return false
		})
		return got
	}
	if awaitWake("(plain)", false) {
		t.Error("a plain wake-up arrived as limited")
	}
	// A limited one arrives as limited (plain ones sent before may still
	// come first, alone: wait for it).
	for !awaitWake("(limited)", true) {
	}
	subscribers := func() int64 {
		t.Helper()
		res, err := e.rdb.PubSubNumSub(ctx, e.keys.Wakeup()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return res[e.keys.Wakeup()]
	}
	if n := subscribers(); n != 1 {
		t.Errorf("%d subscribers on %s, want 1", n, e.keys.Wakeup())
	}

	// A connection killed under the subscription is replaced, and
	// wake-ups arrive again. (This test is the package's only
	// subscriber, so killing every pubsub client kills only its own.)
	if err := e.rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch: // a wake-up sent before the kill
	default:
	}
	awaitWake("after the kill", false)

	// After stop the subscription leaves the server.
	stop()
	testwait.For(t, 10*time.Second, "the subscription to "+e.keys.Wakeup()+" to leave after stop", func() bool {
		return subscribers() == 0
	})
}

func deadEntry(id int64) wire.DeadEntry {
	return wire.DeadEntry{JobID: id, Reason: "max_retries_exceeded", Errors: json.RawMessage(`[{"attempt":1}]`), FailedAt: created,
		OriginalJob: wire.DeadJob{JobID: id, Name: "n", Queue: "default", Payload: json.RawMessage(`{}`), Attempts: 1, LastError: "x", CreatedAt: created}}
}

func TestDeadList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	dead := func(max int) []wire.DeadEntry {
		t.Helper()
		es, err := e.q.DeadEntries(ctx, max)
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	length := func() int64 {
		t.Helper()
		n, err := e.q.DeadLen(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := length(); n != 0 {
		t.Errorf("empty list length %d", n)
	}
	if err := e.q.PushDead(ctx, []wire.DeadEntry{deadEntry(1)}); err != nil {
		t.Fatal(err)
	}
	if err := e.q.PushDead(ctx, []wire.DeadEntry{deadEntry(2), deadEntry(3)}); err != nil {
		t.Fatal(err)
	}
	if err := e.q.PushDead(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if n := length(); n != 3 {
		t.Errorf("length %d, want 3", n)
	}
	// Each entry is pushed onto the head in turn: the newest first.
	if got := dead(10); !same(t, got, []wire.DeadEntry{deadEntry(3), deadEntry(2), deadEntry(1)}) {
		t.Errorf("entries = %+v", got)
	}
	if got := dead(2); !same(t, got, []wire.DeadEntry{deadEntry(3), deadEntry(2)}) {
		t.Errorf("first two = %+v", got)
	}
	// An undecodable entry is counted but skipped.
	if err := e.rdb.LPush(ctx, e.keys.DeadLetter(), "junk").Err(); err != nil {
		t.Fatal(err)
	}
	if n, got := length(), dead(10); n != 4 || len(got) != 3 {
		t.Errorf("with junk: length %d, %d entries", n, len(got))
	}

	// Rebuild: the list becomes exactly the pages appended, in order,
	// with no leftovers.
	es := make([]wire.DeadEntry, 2500)
	for i := range es {
		es[i] = deadEntry(int64(10_000 - i))
	}
	rebuild := func(epoch int64, pages ...[]wire.DeadEntry) error {
		t.Helper()
		if err := e.q.DeadRebuildStart(ctx); err != nil {
			t.Fatal(err)
		}
		for _, p := range pages {
			if err := e.q.DeadRebuildAppend(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		return e.q.DeadRebuildFinish(ctx, epoch)
	}
	if err := rebuild(2, es[:1000], es[1000:2000], es[2000:]); err != nil {
		t.Fatal(err)
	}
	if n := length(); n != int64(len(es)) {
		t.Errorf("length after rebuild %d, want %d", n, len(es))
	}
	if got := dead(len(es)); !same(t, got, es) {
		t.Errorf("entries after rebuild differ (%d entries)", len(got))
	}
	if err := rebuild(2, es[:2]); err != nil {
		t.Fatal(err)
	}
	if got := dead(10); !same(t, got, es[:2]) {
		t.Errorf("entries after second rebuild = %+v", got)
	}
	// A deposed leader's rebuild (an older epoch) is not swapped in.
	if err := rebuild(1, es[5:9]); !errors.Is(err, job.ErrDeposed) {
		t.Errorf("rebuild of an older epoch = %v; want ErrDeposed", err)
	}
	if got := dead(10); !same(t, got, es[:2]) {
		t.Errorf("entries after a deposed leader's rebuild = %+v", got)
	}
	if err := rebuild(3); err != nil {
		t.Fatal(err)
	}
	if n := length(); n != 0 {
		t.Errorf("length after a rebuild with nothing = %d", n)
	}
	if keys := e.rdb.Keys(ctx, e.keys.Prefix+"*").Val(); len(keys) != 1 || keys[0] != e.keys.DeadLetterEpoch() {
		t.Errorf("keys left: %v, want only the epoch", keys)
	}
}

// TestConcurrentDeliverReceive: many deliveries and receivers at once lose
// and duplicate nothing.
func TestConcurrentDeliverReceive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	const workers, perWorker = 4, 250
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; i < perWorker; i += 50 {
				batch := make([]wire.Delivery, 50)
				for j := range batch {
					batch[j] = delivery(int64(w*perWorker + i + j + 1))
				}
				if err := e.q.Deliver(ctx, outbox(wire.CodecJSON, map[string][]wire.Delivery{fmt.Sprint("w", w): batch})); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	got := make([][]int64, workers)
	for w := range workers {
		wg.Go(func() {
			for len(got[w]) < perWorker {
				in, err := e.q.Receive(ctx, fmt.Sprint("w", w), 7, time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				for _, d := range in.Deliveries {
					got[w] = append(got[w], d.JobID)
				}
			}
		})
	}
	wg.Wait()
	for w := range workers {
		want := make([]int64, perWorker)
		for i := range want {
			want[i] = int64(w*perWorker + i + 1)
		}
		if !slices.Equal(got[w], want) {
			t.Errorf("worker %d received %d jobs out of order or with gaps", w, len(got[w]))
		}
	}
}

// TestRemoveDeliveries: only the deliveries of the given lease tokens go,
// also when a payload holds a "lease_token" key of its own, and whatever
// else is on the list (a newer lease of a worker that came back) stays.
func TestRemoveDeliveries(t *testing.T) {
	t.Parallel()
	for _, codec := range []int{wire.CodecJSON, wire.CodecBinary, wire.CodecBatch} {
		t.Run(fmt.Sprint("codec=", codec), func(t *testing.T) { testRemoveDeliveries(t, queue.Outbox{Codec: codec}) })
	}
}

func testRemoveDeliveries(t *testing.T, out queue.Outbox) {
	e := newEnv(t)
	ctx := t.Context()
	big := int64(1<<62 + 12345) // beyond a double's exact integers
	ds := []wire.Delivery{
		{JobID: 1, Name: "n", Payload: json.RawMessage(`{"lease_token":7}`), LeaseToken: big, CreatedAt: created},
		{JobID: 2, Name: "n", Payload: json.RawMessage(`null`), LeaseToken: 7, CreatedAt: created},
		{JobID: 3, Name: "n", Payload: json.RawMessage(`null`), LeaseToken: big + 1, CreatedAt: created},
	}
	out.Deliveries = ds
	if err := e.q.Deliver(ctx, map[string]queue.Outbox{"w": out}); err != nil {
		t.Fatal(err)
	}
	n, err := e.q.RemoveDeliveries(ctx, "w", []int64{big, 99})
	if err != nil || n != 1 {
		t.Fatalf("remove = %d, %v; want 1", n, err)
	}
	in := e.receive(t, "w", 10)
	var got []int64
	for _, d := range in.Deliveries {
		got = append(got, d.JobID)
	}
	if !slices.Equal(got, []int64{2, 3}) {
		t.Errorf("left on the list: jobs %v, want 2 and 3", got)
	}
	if n, err := e.q.RemoveDeliveries(ctx, "nobody", []int64{1}); err != nil || n != 0 {
		t.Errorf("remove from an empty list = %d, %v", n, err)
	}
}

// newResultsEnv opens the leader's side (with the results group) and a
// worker's side of the same key space.
func newResultsEnv(t *testing.T) (leader, worker *env) {
	t.Helper()
	leader = newEnv(t)
	if err := leader.q.EnsureResultsGroup(t.Context()); err != nil {
		t.Fatal(err)
	}
	return leader, openEnv(t, redistest.URL(), leader.keys.Prefix)
}

// TestResultsCodec: a worker's queue sends results as JSON until it has
// received a delivery in the binary codec (its leader speaks it), then in
// the binary codec; the leader's ReadResults decodes both to the same value.
func TestResultsCodec(t *testing.T) {
	t.Parallel()
	e, worker := newResultsEnv(t)
	ctx := t.Context()
	sent := []wire.Result{result(1, wire.OutcomeCompleted), result(2, wire.OutcomeFailed)}
	if err := worker.q.SendResults(ctx, sent[:1]); err != nil {
		t.Fatal(err)
	}
	if err := e.q.Deliver(ctx, outbox(wire.CodecBinary, map[string][]wire.Delivery{"w": {delivery(9)}})); err != nil {
		t.Fatal(err)
	}
	if in := worker.receive(t, "w", 10); len(in.Deliveries) != 1 || in.Bad != 0 {
		t.Fatalf("binary delivery received as %+v", in)
	}
	if err := worker.q.SendResults(ctx, sent[1:]); err != nil {
		t.Fatal(err)
	}
	raw, err := e.rdb.XRange(ctx, e.keys.Results(), "-", "+").Result()
	if err != nil || len(raw) != 2 {
		t.Fatalf("results stream: %v, %v", raw, err)
	}
	if v := fmt.Sprint(raw[0].Values["r"]); !strings.HasPrefix(v, "{") {
		t.Errorf("result before any binary delivery = %q, want JSON", v)
	}
	if v := fmt.Sprint(raw[1].Values["r"]); !wire.IsBinary([]byte(v)) {
		t.Errorf("result after a binary delivery = %q, want the binary codec", v)
	}
	got, bad, err := e.q.ReadResults(ctx, false, 10, 0)
	if err != nil || len(bad) != 0 {
		t.Fatalf("read results: %v, bad %v", err, bad)
	}
	if !same(t, results(got), sent) {
		t.Errorf("read back %+v, want %+v", results(got), sent)
	}
}

// TestResultBatches: once a delivery says the leader reads result batches,
// a worker's queue sends the results of one call as one stream entry per
// 256 (the leader reads them back in order, each with its entry's id); a
// delivery from a leader that does not turns it back to one entry each. A
// result of a batch that does not decode is reported in bad, once, with
// its entry's id, and the others of the entry are read.
func TestResultBatches(t *testing.T) {
	t.Parallel()
	e, worker := newResultsEnv(t)
	ctx := t.Context()
	deliver := func(out queue.Outbox) {
		t.Helper()
		out.Deliveries = []wire.Delivery{delivery(9)}
		if err := e.q.Deliver(ctx, map[string]queue.Outbox{"w": out}); err != nil {
			t.Fatal(err)
		}
		if in := worker.receive(t, "w", 10); len(in.Deliveries) != 1 || in.Bad != 0 {
			t.Fatalf("delivery %+v received as %+v", out, in)
		}
	}
	entries := func() []redis.XMessage {
		t.Helper()
		raw, err := e.rdb.XRange(ctx, e.keys.Results(), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}

	deliver(queue.Outbox{Codec: wire.CodecBatch})
	var sent []wire.Result
	for i := range 300 {
		sent = append(sent, result(int64(i+1), wire.OutcomeCompleted))
	}
	if err := worker.q.SendResults(ctx, sent); err != nil {
		t.Fatal(err)
	}
	raw := entries()
	if len(raw) != 2 || raw[0].Values["b"] == nil || raw[1].Values["b"] == nil {
		t.Fatalf("300 results went to %d entries (%v); want 2 batches", len(raw), raw)
	}
	got, bad, err := e.q.ReadResults(ctx, false, 10, 0)
	if err != nil || len(bad) != 0 {
		t.Fatalf("read results: %v, bad %v", err, bad)
	}
	if !same(t, results(got), sent) {
		t.Fatalf("read back %d results, not the 300 sent in order", len(got))
	}
	if got[0].ID != raw[0].ID || got[255].ID != raw[0].ID || got[256].ID != raw[1].ID || got[299].ID != raw[1].ID {
		t.Errorf("ids %s, %s, %s, %s; want the first entry's for 256, then the second's", got[0].ID, got[255].ID, got[256].ID, got[299].ID)
	}

	// An older leader delivers: one entry per result again.
	deliver(queue.Outbox{Codec: wire.CodecBinary})
	if err := worker.q.SendResults(ctx, sent[:2]); err != nil {
		t.Fatal(err)
	}
	if raw := entries(); len(raw) != 4 || raw[2].Values["r"] == nil || raw[3].Values["r"] == nil {
		t.Fatalf("after an older leader's delivery: %v; want two single entries more", raw[2:])
	}

	// A batch holding a result that does not decode (no job id).
	poison := wire.AppendResultBatch(nil, []wire.Result{sent[0], {LeaseToken: 1, WorkerID: "w", Outcome: wire.OutcomeCompleted}, sent[1]})
	id, err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Results(), Values: []any{"b", poison}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	got, bad, err = e.q.ReadResults(ctx, false, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[2].ID != id || got[3].ID != id || !slices.Equal(bad, []string{id}) {
		t.Errorf("read %d results (%v), bad %v; want the 2 singles and the batch's 2 good ones, and its id once in bad", len(got), ids(got), bad)
	}
}

// TestResultsCodecBackToJSON: a worker that has answered a leader in the
// binary codec answers in JSON again once a JSON delivery comes (an older,
// JSON-only leader took over): a result that leader's reader, which takes
// field "r" as JSON, accepts.
func TestResultsCodecBackToJSON(t *testing.T) {
	t.Parallel()
	for _, codec := range []int{wire.CodecBinary, wire.CodecBatch} {
		t.Run(fmt.Sprint("codec=", codec), func(t *testing.T) {
			e, worker := newResultsEnv(t)
			ctx := t.Context()
			for _, c := range []int{codec, wire.CodecJSON} {
				if err := e.q.Deliver(ctx, outbox(c, map[string][]wire.Delivery{"w": {delivery(9)}})); err != nil {
					t.Fatal(err)
				}
				if in := worker.receive(t, "w", 10); len(in.Deliveries) != 1 || in.Bad != 0 {
					t.Fatalf("delivery in codec %d received as %+v", c, in)
				}
			}
			sent := result(1, wire.OutcomeCompleted)
			if err := worker.q.SendResults(ctx, []wire.Result{sent}); err != nil {
				t.Fatal(err)
			}
			raw, err := e.rdb.XRange(ctx, e.keys.Results(), "-", "+").Result()
			if err != nil || len(raw) != 1 {
				t.Fatalf("results stream: %v, %v", raw, err)
			}
			var got wire.Result
			if err := json.Unmarshal([]byte(fmt.Sprint(raw[0].Values["r"])), &got); err != nil {
				t.Fatalf("result after a JSON delivery = %v; a JSON-only leader cannot read it: %v", raw[0].Values, err)
			}
			if !same(t, got, sent) {
				t.Errorf("JSON-only leader read %+v, want %+v", got, sent)
			}
		})
	}
}

// TestResultsUnappliedBy: a result that arrived by the given time is
// unapplied until the leader has acknowledged it, whether the results
// group has not delivered it yet or delivered it without an ack; one
// acknowledged but not deleted (an ack whose XDEL was lost) is applied;
// one that arrived later does not count.
func TestResultsUnappliedBy(t *testing.T) {
	t.Parallel()
	e, worker := newResultsEnv(t)
	ctx := t.Context()
	unapplied := func(at time.Time) bool {
		t.Helper()
		u, err := e.q.ResultsUnappliedBy(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	if noStream := newEnv(t); func() bool {
		u, err := noStream.q.ResultsUnappliedBy(ctx, time.Now())
		return u || err != nil
	}() {
		t.Error("no results stream: unapplied results, or an error")
	}
	if err := worker.q.SendResults(ctx, []wire.Result{result(1, wire.OutcomeCompleted)}); err != nil {
		t.Fatal(err)
	}
	raw, err := e.rdb.XRange(ctx, e.keys.Results(), "-", "+").Result()
	if err != nil || len(raw) != 1 {
		t.Fatalf("results stream: %v, %v", raw, err)
	}
	at := queue.StreamIDTime(raw[0].ID)
	if unapplied(at.Add(-time.Millisecond)) {
		t.Error("a result that arrived later counts")
	}
	if !unapplied(at) {
		t.Error("a result not delivered yet does not count")
	}
	got, _ := e.read(t, false)
	if len(got) != 1 || !unapplied(at) {
		t.Errorf("read %d results; a result delivered but not acknowledged does not count", len(got))
	}
	if err := e.rdb.XAck(ctx, e.keys.Results(), queue.ResultsGroup, raw[0].ID).Err(); err != nil {
		t.Fatal(err)
	}
	if unapplied(at.Add(time.Hour)) {
		t.Error("a result acknowledged (its entry left in the stream) counts")
	}
	if err := e.rdb.XGroupDestroy(ctx, e.keys.Results(), queue.ResultsGroup).Err(); err != nil {
		t.Fatal(err)
	}
	if !unapplied(at) {
		t.Error("with no results group, a result in the stream does not count")
	}
}
