// Package queue is the only code that talks to Redis. Redis is the fast
// transport between processes, never the record: everything here can be
// lost (a flush, a restart) and rebuilt from PostgreSQL, and the coordinator
// is written so that it is (see docs/architecture.md, "Redis keys").
//
// Paths: deliveries go to one list per worker (LPUSH by the coordinator,
// BLMPOP by the worker); results come back on one stream read by a consumer
// group and acknowledged only after PostgreSQL commits; heartbeats travel on
// a second stream; wake-ups on a pub/sub channel. Every batch is one
// pipelined round trip.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/wire"
)

// Queue wraps a Redis client with the scheduler's key layout.
type Queue struct {
	rdb  *redis.Client
	keys Keys
}

// Open connects to redisURL (redis:// or rediss://) and checks the connection.
func Open(ctx context.Context, redisURL, prefix string) (*Queue, error) {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	opt.PoolSize = 32
	rdb := redis.NewClient(opt)
	q := &Queue{rdb: rdb, keys: Keys{Prefix: prefix}}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("ping redis: %w", err)
	}
	return q, nil
}

// Close closes the client.
func (q *Queue) Close() error { return q.rdb.Close() }

// Keys returns the key layout.
func (q *Queue) Keys() Keys { return q.keys }

// Ping checks that Redis answers.
func (q *Queue) Ping(ctx context.Context) error { return q.rdb.Ping(ctx).Err() }

// heartbeatStreamLen bounds the heartbeat stream (approximately).
const heartbeatStreamLen = 10_000

// ---- coordinator → worker ----

// Deliver pushes leased jobs onto their workers' lists in one round trip.
func (q *Queue) Deliver(ctx context.Context, byWorker map[string][]wire.Delivery) error {
	if len(byWorker) == 0 {
		return nil
	}
	pipe := q.rdb.Pipeline()
	for id, ds := range byWorker {
		vals := make([]any, len(ds))
		for i := range ds {
			b, err := json.Marshal(&ds[i])
			if err != nil {
				return fmt.Errorf("encode delivery %d: %w", ds[i].JobID, err)
			}
			vals[i] = b
		}
		pipe.LPush(ctx, q.keys.WorkerJobs(id), vals...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("deliver jobs: %w", err)
	}
	return nil
}

// SendControl pushes a control command to one worker.
func (q *Queue) SendControl(ctx context.Context, workerID string, c wire.Control) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode control: %w", err)
	}
	if err := q.rdb.LPush(ctx, q.keys.WorkerControl(workerID), b).Err(); err != nil {
		return fmt.Errorf("send control to %s: %w", workerID, err)
	}
	return nil
}

// DropWorkerQueues deletes a worker's delivery and control lists (its jobs
// there were reclaimed and will be delivered to someone else).
func (q *Queue) DropWorkerQueues(ctx context.Context, workerID string) error {
	return q.rdb.Del(ctx, q.keys.WorkerJobs(workerID), q.keys.WorkerControl(workerID)).Err()
}

// Inbox is what one Receive call got: control commands and deliveries.
type Inbox struct {
	Controls   []wire.Control
	Deliveries []wire.Delivery
	Bad        int // messages that did not decode (dropped)
}

// Receive blocks up to block (whole seconds; 0 does not block) for the
// worker's control or delivery list and returns up to max messages from the
// first non-empty one (control first). An empty Inbox means the wait ran out.
func (q *Queue) Receive(ctx context.Context, workerID string, max int, block time.Duration) (Inbox, error) {
	var in Inbox
	keys := []string{q.keys.WorkerControl(workerID), q.keys.WorkerJobs(workerID)}
	var key string
	var vals []string
	var err error
	if block <= 0 {
		key, vals, err = q.rdb.LMPop(ctx, "right", int64(max), keys...).Result()
	} else {
		key, vals, err = q.rdb.BLMPop(ctx, block, "right", int64(max), keys...).Result()
	}
	if errors.Is(err, redis.Nil) {
		return in, nil
	}
	if err != nil {
		return in, fmt.Errorf("receive for %s: %w", workerID, err)
	}
	for _, v := range vals {
		if key == q.keys.WorkerControl(workerID) {
			var c wire.Control
			if err := json.Unmarshal([]byte(v), &c); err != nil {
				in.Bad++
				continue
			}
			in.Controls = append(in.Controls, c)
			continue
		}
		d, err := DecodeDelivery([]byte(v))
		if err != nil {
			in.Bad++
			continue
		}
		in.Deliveries = append(in.Deliveries, d)
	}
	return in, nil
}

// DecodeDelivery decodes and checks one delivery message.
func DecodeDelivery(b []byte) (wire.Delivery, error) {
	var d wire.Delivery
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("decode delivery: %w", err)
	}
	if d.JobID <= 0 || d.LeaseToken <= 0 || d.Name == "" {
		return d, fmt.Errorf("decode delivery: missing job_id, lease_token or name")
	}
	return d, nil
}

// ---- wake-ups ----

// Wake tells the coordinator new jobs are due. Best effort.
func (q *Queue) Wake(ctx context.Context) error {
	return q.rdb.Publish(ctx, q.keys.Wakeup(), "1").Err()
}

// SubscribeWake returns a channel that receives a value per wake-up, and a
// function to stop listening.
func (q *Queue) SubscribeWake(ctx context.Context) (<-chan struct{}, func()) {
	sub := q.rdb.Subscribe(ctx, q.keys.Wakeup())
	out := make(chan struct{}, 1)
	go func() {
		for range sub.Channel() {
			select {
			case out <- struct{}{}:
			default: // one pending wake-up is as good as many
			}
		}
	}()
	return out, func() { _ = sub.Close() }
}

// ---- worker → coordinator ----

// SendHeartbeat appends a heartbeat to the heartbeat stream.
func (q *Queue) SendHeartbeat(ctx context.Context, hb wire.Heartbeat) error {
	b, err := json.Marshal(hb)
	if err != nil {
		return fmt.Errorf("encode heartbeat: %w", err)
	}
	err = q.rdb.XAdd(ctx, &redis.XAddArgs{Stream: q.keys.Heartbeats(), MaxLen: heartbeatStreamLen, Approx: true,
		Values: []any{"h", b}}).Err()
	if err != nil {
		return fmt.Errorf("send heartbeat: %w", err)
	}
	return nil
}

// ReceivedHeartbeat is a decoded heartbeat and its stream id.
type ReceivedHeartbeat struct {
	ID        string
	Heartbeat wire.Heartbeat
}

// LastHeartbeatID returns the id to read new heartbeats after ("$" semantics
// without losing any between two reads).
func (q *Queue) LastHeartbeatID(ctx context.Context) (string, error) {
	msgs, err := q.rdb.XRevRangeN(ctx, q.keys.Heartbeats(), "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("last heartbeat id: %w", err)
	}
	if len(msgs) == 0 {
		return "0-0", nil
	}
	return msgs[0].ID, nil
}

// ReadHeartbeats blocks up to block (0 does not block) for heartbeats after
// id. Undecodable entries are counted in bad and skipped.
func (q *Queue) ReadHeartbeats(ctx context.Context, after string, max int, block time.Duration) (hbs []ReceivedHeartbeat, last string, bad int, err error) {
	last = after
	streams, err := q.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{q.keys.Heartbeats(), after}, Count: int64(max), Block: noBlockIfZero(block)}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, last, 0, nil
	}
	if err != nil {
		return nil, last, 0, fmt.Errorf("read heartbeats: %w", err)
	}
	for _, s := range streams {
		for _, m := range s.Messages {
			last = m.ID
			hb, err := DecodeHeartbeat(field(m.Values, "h"))
			if err != nil {
				bad++
				continue
			}
			hbs = append(hbs, ReceivedHeartbeat{ID: m.ID, Heartbeat: hb})
		}
	}
	return hbs, last, bad, nil
}

// DecodeHeartbeat decodes and checks one heartbeat.
func DecodeHeartbeat(b []byte) (wire.Heartbeat, error) {
	var hb wire.Heartbeat
	if err := json.Unmarshal(b, &hb); err != nil {
		return hb, fmt.Errorf("decode heartbeat: %w", err)
	}
	if hb.WorkerID == "" || len(hb.WorkerID) > 200 || hb.Concurrency < 1 || hb.Concurrency > 100_000 {
		return hb, fmt.Errorf("decode heartbeat: bad worker_id or concurrency")
	}
	return hb, nil
}

// SendResults appends attempt outcomes to the results stream in one round trip.
func (q *Queue) SendResults(ctx context.Context, rs []wire.Result) error {
	if len(rs) == 0 {
		return nil
	}
	pipe := q.rdb.Pipeline()
	for i := range rs {
		b, err := json.Marshal(&rs[i])
		if err != nil {
			return fmt.Errorf("encode result %d: %w", rs[i].JobID, err)
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: q.keys.Results(), Values: []any{"r", b}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("send results: %w", err)
	}
	return nil
}

// ReceivedResult is a decoded result and its stream id (for Ack).
type ReceivedResult struct {
	ID     string
	Result wire.Result
}

// ResultsConsumer is the consumer name every coordinator uses in the
// results group: only the leader reads, and a new leader must see the
// entries its predecessor read but never acknowledged.
const ResultsConsumer = "leader"

// ReadResults returns up to max results: first any delivered earlier but not
// acknowledged (pending), then new ones, blocking up to block (0 does not
// block). Undecodable entries are returned in bad (ids to acknowledge and
// drop). It recreates the consumer group if Redis lost it.
func (q *Queue) ReadResults(ctx context.Context, pending bool, max int, block time.Duration) (rs []ReceivedResult, bad []string, err error) {
	start := ">"
	if pending {
		start = "0"
	}
	args := &redis.XReadGroupArgs{Group: ResultsGroup, Consumer: ResultsConsumer,
		Streams: []string{q.keys.Results(), start}, Count: int64(max), Block: noBlockIfZero(block)}
	if pending {
		args.Block = -1 // no BLOCK argument: history reads never block
	}
	streams, err := q.rdb.XReadGroup(ctx, args).Result()
	if err != nil && strings.HasPrefix(err.Error(), "NOGROUP") {
		if err := q.EnsureResultsGroup(ctx); err != nil {
			return nil, nil, err
		}
		streams, err = q.rdb.XReadGroup(ctx, args).Result()
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read results: %w", err)
	}
	for _, s := range streams {
		for _, m := range s.Messages {
			r, err := DecodeResult(field(m.Values, "r"))
			if err != nil {
				bad = append(bad, m.ID)
				continue
			}
			rs = append(rs, ReceivedResult{ID: m.ID, Result: r})
		}
	}
	return rs, bad, nil
}

// DecodeResult decodes and checks one result message.
func DecodeResult(b []byte) (wire.Result, error) {
	var r wire.Result
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decode result: %w", err)
	}
	if r.JobID <= 0 || r.LeaseToken <= 0 {
		return r, fmt.Errorf("decode result: missing job_id or lease_token")
	}
	switch r.Outcome {
	case wire.OutcomeCompleted, wire.OutcomeFailed, wire.OutcomeReleased:
	default:
		return r, fmt.Errorf("decode result: unknown outcome %q", r.Outcome)
	}
	if len(r.Result) > 0 && !json.Valid(r.Result) {
		return r, fmt.Errorf("decode result: result is not JSON")
	}
	return r, nil
}

// EnsureResultsGroup creates the results stream and its consumer group if missing.
func (q *Queue) EnsureResultsGroup(ctx context.Context) error {
	err := q.rdb.XGroupCreateMkStream(ctx, q.keys.Results(), ResultsGroup, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("create results group: %w", err)
	}
	return nil
}

// AckResults acknowledges and deletes processed results in one round trip.
func (q *Queue) AckResults(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	pipe := q.rdb.Pipeline()
	pipe.XAck(ctx, q.keys.Results(), ResultsGroup, ids...)
	pipe.XDel(ctx, q.keys.Results(), ids...)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("ack results: %w", err)
	}
	return nil
}

// ---- dead-letter list ----

// PushDead prepends entries to the dead-letter list.
func (q *Queue) PushDead(ctx context.Context, es []wire.DeadEntry) error {
	if len(es) == 0 {
		return nil
	}
	vals := make([]any, len(es))
	for i := range es {
		b, err := json.Marshal(&es[i])
		if err != nil {
			return fmt.Errorf("encode dead entry: %w", err)
		}
		vals[i] = b
	}
	if err := q.rdb.LPush(ctx, q.keys.DeadLetter(), vals...).Err(); err != nil {
		return fmt.Errorf("push dead entries: %w", err)
	}
	return nil
}

// DeadLen returns the dead-letter list's length.
func (q *Queue) DeadLen(ctx context.Context) (int64, error) {
	n, err := q.rdb.LLen(ctx, q.keys.DeadLetter()).Result()
	if err != nil {
		return 0, fmt.Errorf("dead-letter length: %w", err)
	}
	return n, nil
}

// DeadEntries returns the dead-letter list's entries, newest first.
func (q *Queue) DeadEntries(ctx context.Context, max int) ([]wire.DeadEntry, error) {
	vals, err := q.rdb.LRange(ctx, q.keys.DeadLetter(), 0, int64(max-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("read dead-letter list: %w", err)
	}
	out := make([]wire.DeadEntry, 0, len(vals))
	for _, v := range vals {
		var e wire.DeadEntry
		if err := json.Unmarshal([]byte(v), &e); err == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// ReplaceDead rebuilds the dead-letter list from es (newest first): written
// under a temporary key, then renamed over the list in one step.
func (q *Queue) ReplaceDead(ctx context.Context, es []wire.DeadEntry) error {
	tmp := q.keys.DeadLetter() + ":rebuild"
	pipe := q.rdb.TxPipeline()
	pipe.Del(ctx, tmp)
	for start := 0; start < len(es); start += 1000 {
		end := min(start+1000, len(es))
		vals := make([]any, 0, end-start)
		for i := start; i < end; i++ {
			b, err := json.Marshal(&es[i])
			if err != nil {
				return fmt.Errorf("encode dead entry: %w", err)
			}
			vals = append(vals, b)
		}
		pipe.RPush(ctx, tmp, vals...)
	}
	if len(es) == 0 {
		pipe.Del(ctx, q.keys.DeadLetter())
	} else {
		pipe.Rename(ctx, tmp, q.keys.DeadLetter())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("rebuild dead-letter list: %w", err)
	}
	return nil
}

// ---- helpers ----

// noBlockIfZero maps a wait under a millisecond to go-redis's "no BLOCK
// argument" (-1): go-redis sends BLOCK in whole milliseconds, and BLOCK 0
// is Redis's "wait forever".
func noBlockIfZero(block time.Duration) time.Duration {
	if block < time.Millisecond {
		return -1
	}
	return block
}

func field(values map[string]any, name string) []byte {
	switch v := values[name].(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	}
	return nil
}
