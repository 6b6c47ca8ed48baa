package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/wire"
)

// ---- coordinator → worker ----

// Deliver pushes leased jobs onto their workers' lists in one round trip.
func (q *Queue) Deliver(ctx context.Context, byWorker map[string]Outbox) error {
	if len(byWorker) == 0 {
		return nil
	}
	pipe := q.rdb.Pipeline()
	for id, out := range byWorker {
		vals := make([]any, len(out.Deliveries))
		// The binary forms share one buffer, sized for all of them: one
		// allocation per worker and round instead of a few per job as
		// each message grew on its own.
		var buf []byte
		if out.Codec >= wire.CodecBinary {
			size := 0
			for i := range out.Deliveries {
				size += wire.DeliverySizeBound(&out.Deliveries[i])
			}
			buf = make([]byte, 0, size)
		}
		for i := range out.Deliveries {
			d := &out.Deliveries[i]
			start := len(buf)
			switch {
			case out.Codec >= wire.CodecTrace:
				buf = wire.AppendDeliveryTrace(wire.AppendDeliveryForLogs(buf, d), d)
			case out.Codec >= wire.CodecLogs:
				buf = wire.AppendDeliveryForLogs(buf, d)
			case out.Codec >= wire.CodecBatch:
				buf = wire.AppendDeliveryForBatches(buf, d)
			case out.Codec >= wire.CodecBinary:
				buf = wire.AppendDelivery(buf, d)
			}
			if out.Codec >= wire.CodecBinary {
				vals[i] = buf[start:len(buf):len(buf)]
				continue
			}
			b, err := json.Marshal(d)
			if err != nil {
				return fmt.Errorf("encode delivery %d: %w", d.JobID, err)
			}
			vals[i] = b
		}
		pushChunks(ctx, pipe, q.keys.WorkerJobs(id), vals)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("deliver jobs: %w", err)
	}
	return nil
}

// maxPushBytes bounds the deliveries one LPUSH carries. Redis runs one
// command at a time and copies a command's arguments before it runs the
// next, other clients' heartbeats and results included: a worker's share
// of a round of large payloads goes in several commands of one pipeline.
const maxPushBytes = 4 << 20

// pushChunks queues LPUSHes of vals (each a []byte) onto key in pipe, in
// order, each of at most maxPushBytes (or one value).
func pushChunks(ctx context.Context, pipe redis.Pipeliner, key string, vals []any) {
	start, size := 0, 0
	for i, v := range vals {
		n := len(v.([]byte))
		if i > start && size+n > maxPushBytes {
			pipe.LPush(ctx, key, vals[start:i]...)
			start, size = i, 0
		}
		size += n
	}
	if start < len(vals) {
		pipe.LPush(ctx, key, vals[start:]...)
	}
}

// Outbox is one worker's deliveries of a dispatch round, and the newest
// codec its heartbeats announce (wire.CodecJSON, wire.CodecBinary,
// wire.CodecBatch: it may send result batches, which this leader reads, or
// wire.CodecLogs: also results with logs, or wire.CodecTrace: also
// deliveries that end with a trace context).
type Outbox struct {
	Deliveries []wire.Delivery
	Codec      int
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

// DropWorkerQueues deletes a worker's delivery and control lists: a worker
// that stopped cleanly, or one forgotten after an hour unavailable.
func (q *Queue) DropWorkerQueues(ctx context.Context, workerID string) error {
	return q.rdb.Del(ctx, q.keys.WorkerJobs(workerID), q.keys.WorkerControl(workerID)).Err()
}

// removeDeliveriesScript removes from a worker's delivery list the entries
// whose lease token is one of ARGV, and returns how many it removed.
//
//	KEYS[1]  the worker's delivery list (dts:worker:{id}:jobs)
//	ARGV     lease tokens, as decimal strings
//
// A binary delivery (wire.AppendDelivery) starts with its token in decimal
// after the magic byte (\1, \2 from a leader that reads result
// batches, or \3 from one that also reads logs) and before a \0. A JSON delivery's token is the
// last "lease_token":N in it (the field comes after the payload, which may
// hold a key of that name). Matching the text avoids cjson, which reads
// 63-bit tokens as lossy doubles.
var removeDeliveriesScript = redis.NewScript(`
local drop = {}
for i = 1, #ARGV do drop[ARGV[i]] = true end
local n = 0
for _, v in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local tok = string.match(v, '^[\1\2\3](%d+)%z')
  if not tok then
    for t in string.gmatch(v, '"lease_token":(%d+)') do tok = t end
  end
  if tok and drop[tok] then
    n = n + redis.call('LREM', KEYS[1], 1, v)
  end
end
return n
`)

// RemoveDeliveries deletes the deliveries with these lease tokens from a
// worker's list (leases reclaimed from a worker declared dead) and leaves
// every other entry: a worker that came back under the same id keeps the
// deliveries of its newer leases.
func (q *Queue) RemoveDeliveries(ctx context.Context, workerID string, tokens []int64) (int, error) {
	if len(tokens) == 0 {
		return 0, nil
	}
	args := make([]any, len(tokens))
	for i, t := range tokens {
		args[i] = strconv.FormatInt(t, 10)
	}
	n, err := removeDeliveriesScript.Run(ctx, q.rdb, []string{q.keys.WorkerJobs(workerID)}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("remove deliveries of %s: %w", workerID, err)
	}
	return n, nil
}

// Inbox is what one Receive call got: control commands and deliveries.
type Inbox struct {
	Controls   []wire.Control
	Deliveries []wire.Delivery
	Bad        int // messages that did not decode (dropped)
	// DeliveryBytes is the size of the delivery messages as received.
	DeliveryBytes int
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
		in.DeliveryBytes += len(v)
		d, err := DecodeDelivery([]byte(v))
		if err != nil {
			in.Bad++
			continue
		}
		// Answer in what the leader speaks (wire/codec.go), as its latest
		// delivery says: a JSON one comes from a leader that reads only
		// JSON (an older coordinator took over).
		switch v[0] {
		case wire.BinaryMagic:
			q.resultCodec.Store(wire.CodecBinary)
		case wire.BatchMagic:
			q.resultCodec.Store(wire.CodecBatch)
		case wire.LogsMagic:
			q.resultCodec.Store(wire.CodecLogs)
		default:
			q.resultCodec.Store(wire.CodecJSON)
		}
		in.Deliveries = append(in.Deliveries, d)
	}
	return in, nil
}

// DecodeDelivery decodes and checks one delivery message, in the binary
// codec or JSON.
func DecodeDelivery(b []byte) (wire.Delivery, error) {
	var d wire.Delivery
	var err error
	if wire.IsBinary(b) {
		d, err = wire.ParseDelivery(b)
	} else {
		err = json.Unmarshal(b, &d)
	}
	if err != nil {
		return d, fmt.Errorf("decode delivery: %w", err)
	}
	if d.JobID <= 0 || d.LeaseToken <= 0 || d.Name == "" {
		return d, fmt.Errorf("decode delivery: missing job_id, lease_token or name")
	}
	return d, nil
}
