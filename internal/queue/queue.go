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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

// Queue wraps a Redis client with the scheduler's key layout.
type Queue struct {
	rdb  *redis.Client
	keys Keys
	// resultCodec is how the leader reads results, as the latest delivery
	// said (a worker's side; see wire/codec.go): wire.CodecJSON until a
	// binary one came and after a JSON one, else wire.CodecBinary or
	// wire.CodecBatch.
	resultCodec atomic.Int32
}

// poolSize is the most connections a process keeps to Redis.
const poolSize = 32

// Sentinel says which sentinels to ask where the Redis master is. The zero
// value means no Sentinel: the URL's host is the server.
type Sentinel struct {
	// Addrs are the sentinels, host:port each. Any one that answers will
	// do; the client learns the others from it.
	Addrs []string
	// Master is the name the sentinels monitor the master under.
	Master string
	// Password is the sentinels' own requirepass. Empty: none. The
	// master's password is the URL's.
	Password string
}

// Open connects to redisURL (redis:// or rediss://) and checks the connection.
func Open(ctx context.Context, redisURL, prefix string) (*Queue, error) {
	return OpenSentinel(ctx, redisURL, prefix, Sentinel{})
}

// OpenSentinel is Open through Redis Sentinel when s names sentinels: the
// client asks them for the master's address on every new connection and
// drops its connections when they announce a failover, so every command
// after a failover goes to the new master. redisURL then gives only the
// master's user, password, database, options and, for rediss://, the name
// its certificate must hold (its host); its host is not dialled.
func OpenSentinel(ctx context.Context, redisURL, prefix string, s Sentinel) (*Queue, error) {
	rdb, err := newClient(redisURL, s)
	if err != nil {
		return nil, err
	}
	q := &Queue{rdb: rdb, keys: Keys{Prefix: prefix}}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		if len(s.Addrs) > 0 {
			return nil, fmt.Errorf("ping redis master %q through sentinels %s: %w", s.Master, strings.Join(s.Addrs, ","), err)
		}
		return nil, fmt.Errorf("ping redis: %w", err)
	}
	return q, nil
}

func newClient(redisURL string, s Sentinel) (*redis.Client, error) {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	opt.PoolSize = poolSize
	if len(s.Addrs) == 0 {
		return redis.NewClient(opt), nil
	}
	if s.Master == "" {
		return nil, errors.New("redis sentinel: no master name")
	}
	// Every field redis.ParseURL may set, but Addr.
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:       s.Master,
		SentinelAddrs:    s.Addrs,
		SentinelPassword: s.Password,

		Username:   opt.Username,
		Password:   opt.Password,
		DB:         opt.DB,
		Protocol:   opt.Protocol,
		ClientName: opt.ClientName,
		TLSConfig:  opt.TLSConfig,

		MaxRetries:      opt.MaxRetries,
		MinRetryBackoff: opt.MinRetryBackoff,
		MaxRetryBackoff: opt.MaxRetryBackoff,
		DialTimeout:     opt.DialTimeout,
		ReadTimeout:     opt.ReadTimeout,
		WriteTimeout:    opt.WriteTimeout,

		PoolFIFO:                opt.PoolFIFO,
		PoolSize:                opt.PoolSize,
		PoolTimeout:             opt.PoolTimeout,
		MinIdleConns:            opt.MinIdleConns,
		MaxIdleConns:            opt.MaxIdleConns,
		MaxActiveConns:          opt.MaxActiveConns,
		MaxConcurrentDials:      opt.MaxConcurrentDials,
		PipelinePoolSize:        opt.PipelinePoolSize,
		PipelineReadBufferSize:  opt.PipelineReadBufferSize,
		PipelineWriteBufferSize: opt.PipelineWriteBufferSize,
		ConnMaxIdleTime:         opt.ConnMaxIdleTime,
		ConnMaxLifetime:         opt.ConnMaxLifetime,
		ConnMaxLifetimeJitter:   opt.ConnMaxLifetimeJitter,
	}), nil
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
func (q *Queue) Deliver(ctx context.Context, byWorker map[string]Outbox) error {
	if len(byWorker) == 0 {
		return nil
	}
	pipe := q.rdb.Pipeline()
	for id, out := range byWorker {
		vals := make([]any, len(out.Deliveries))
		for i := range out.Deliveries {
			d := &out.Deliveries[i]
			switch {
			case out.Codec >= wire.CodecBatch:
				vals[i] = wire.AppendDeliveryForBatches(nil, d)
				continue
			case out.Codec >= wire.CodecBinary:
				vals[i] = wire.AppendDelivery(nil, d)
				continue
			}
			b, err := json.Marshal(d)
			if err != nil {
				return fmt.Errorf("encode delivery %d: %w", d.JobID, err)
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

// Outbox is one worker's deliveries of a dispatch round, and the newest
// codec its heartbeats announce (wire.CodecJSON, wire.CodecBinary, or
// wire.CodecBatch: it may send result batches, which this leader reads).
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
// after the magic byte (\1, or \2 from a leader that reads result
// batches) and before a \0. A JSON delivery's token is the
// last "lease_token":N in it (the field comes after the payload, which may
// hold a key of that name). Matching the text avoids cjson, which reads
// 63-bit tokens as lossy doubles.
var removeDeliveriesScript = redis.NewScript(`
local drop = {}
for i = 1, #ARGV do drop[ARGV[i]] = true end
local n = 0
for _, v in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local tok = string.match(v, '^[\1\2](%d+)%z')
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
		// Answer in what the leader speaks (wire/codec.go), as its latest
		// delivery says: a JSON one comes from a leader that reads only
		// JSON (an older coordinator took over).
		switch v[0] {
		case wire.BinaryMagic:
			q.resultCodec.Store(wire.CodecBinary)
		case wire.BatchMagic:
			q.resultCodec.Store(wire.CodecBatch)
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

// ---- wake-ups ----

// Wake tells the coordinator new jobs are due. Best effort. w.Limited says
// some of them may have a limit_key: the leader's dispatcher runs its
// limited claim only while it knows such jobs wait, and would otherwise
// learn of them at its next reload (a poll interval later). w.Names, when
// not nil, are the names of the jobs: the dispatcher then claims for the
// worker groups that handle them and for those whose last claim found
// jobs, not for every group (wire.Wake has the payload).
func (q *Queue) Wake(ctx context.Context, w wire.Wake) error {
	return q.rdb.Publish(ctx, q.keys.Wakeup(), wire.FormatWake(w)).Err()
}

// wakeCheck is how long the wake-up subscription may stay silent before
// it pings Redis, so that a connection that died without a word is found
// and replaced (the next receive reconnects and subscribes again).
const wakeCheck = 3 * time.Second

// SubscribeWake returns a channel that receives a value per wake-up and a
// function to stop listening. Wake-ups that come while one is pending are
// merged into it (wire.Wake.Merge).
//
// One goroutine reads the subscription and signals the channel. go-redis's
// Channel would add two more per message (one forwards it, one resets the
// health check's timer), each a wake-up of a parked goroutine: at 1,000
// single submits a second they cost 4 % of the coordinator's CPU
// (docs/benchmarks.md). The health check is kept: a silent wakeCheck
// sends a PING.
func (q *Queue) SubscribeWake(ctx context.Context) (<-chan wire.Wake, func()) {
	sub := q.rdb.Subscribe(ctx, q.keys.Wakeup())
	out := make(chan wire.Wake, 1)
	closed := make(chan struct{})
	go func() {
		for {
			msg, err := sub.ReceiveTimeout(context.Background(), wakeCheck)
			var nerr interface{ Timeout() bool }
			switch {
			case err == nil:
			case errors.Is(err, redis.ErrClosed):
				return
			case errors.As(err, &nerr) && nerr.Timeout():
				_ = sub.Ping(context.Background()) // a failure makes the next receive reconnect
				continue
			default: // Redis away: the next receive reconnects; not in a busy loop
				select {
				case <-closed:
					return
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			if m, ok := msg.(*redis.Message); ok {
				mergeWake(out, wire.ParseWake(m.Payload))
			}
		}
	}()
	var once sync.Once
	return out, func() {
		once.Do(func() {
			close(closed)
			_ = sub.Close()
		})
	}
}

// mergeWake puts a wake-up on out (capacity 1, one sender: the caller),
// merged with the one pending there if any: one pending wake-up is as
// good as many (wire.Wake.Merge).
func mergeWake(out chan wire.Wake, w wire.Wake) {
	for {
		select {
		case out <- w:
			return
		default:
		}
		select {
		case pending := <-out:
			w = w.Merge(pending)
		default: // the receiver took it meanwhile: send again
		}
	}
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

// ReceivedHeartbeat is a decoded heartbeat, its stream id and when it
// arrived in Redis (the id's time, on Redis's clock).
type ReceivedHeartbeat struct {
	ID        string
	At        time.Time
	Heartbeat wire.Heartbeat
}

// HeartbeatRead is what one ReadHeartbeats call got.
type HeartbeatRead struct {
	Heartbeats []ReceivedHeartbeat
	Last       string // the id to read after next time
	Bad        int    // entries that did not decode or validate, skipped
	// ServerTime is Redis's clock just before the read. When Full is
	// false, every heartbeat that arrived up to ServerTime has been read:
	// a worker silent since then is silent on the clock its heartbeats are
	// timed with, whatever this process's own delays.
	ServerTime time.Time
	// Full says the read returned as many entries as asked: more may wait.
	Full bool
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

// ReadHeartbeats asks Redis for its time, then blocks up to block (0 does
// not block) for at most max heartbeats after id.
func (q *Queue) ReadHeartbeats(ctx context.Context, after string, max int, block time.Duration) (HeartbeatRead, error) {
	r := HeartbeatRead{Last: after}
	now, err := q.rdb.Time(ctx).Result()
	if err != nil {
		return r, fmt.Errorf("read redis time: %w", err)
	}
	r.ServerTime = now
	streams, err := q.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{q.keys.Heartbeats(), after}, Count: int64(max), Block: noBlockIfZero(block)}).Result()
	if errors.Is(err, redis.Nil) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("read heartbeats: %w", err)
	}
	n := 0
	for _, s := range streams {
		for _, m := range s.Messages {
			n++
			r.Last = m.ID
			hb, err := DecodeHeartbeat(field(m.Values, "h"))
			if err != nil {
				r.Bad++
				continue
			}
			r.Heartbeats = append(r.Heartbeats, ReceivedHeartbeat{ID: m.ID, At: StreamIDTime(m.ID), Heartbeat: hb})
		}
	}
	r.Full = n >= max
	return r, nil
}

// StreamIDTime is the time in a stream entry id ("<ms>-<seq>"); zero if
// the id is not one.
func StreamIDTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	v, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// CompareStreamIDs orders two stream ids as Redis does (-1, 0, 1).
func CompareStreamIDs(a, b string) int {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	ams, _ := strconv.ParseUint(am, 10, 64)
	bms, _ := strconv.ParseUint(bm, 10, 64)
	if ams != bms {
		return cmpUint(ams, bms)
	}
	asq, _ := strconv.ParseUint(as, 10, 64)
	bsq, _ := strconv.ParseUint(bs, 10, 64)
	return cmpUint(asq, bsq)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Limits of what a worker may say in a heartbeat or a result. A message
// outside them is refused when decoded (and counted), so that no worker's
// input can fail a statement that carries other workers' rows.
const (
	MaxWorkerIDLen = 200  // characters
	maxJobTypes    = 1000 // job types one worker names
	maxConcurrency = 100_000
)

// DecodeHeartbeat decodes and checks one heartbeat.
func DecodeHeartbeat(b []byte) (wire.Heartbeat, error) {
	var hb wire.Heartbeat
	if err := json.Unmarshal(b, &hb); err != nil {
		return hb, fmt.Errorf("decode heartbeat: %w", err)
	}
	if msg := job.CheckText(hb.WorkerID, MaxWorkerIDLen); msg != "" {
		return hb, fmt.Errorf("decode heartbeat: worker_id %s", msg)
	}
	if hb.Concurrency < 1 || hb.Concurrency > maxConcurrency {
		return hb, fmt.Errorf("decode heartbeat: concurrency must be between 1 and %d", maxConcurrency)
	}
	if len(hb.JobTypes) > maxJobTypes {
		return hb, fmt.Errorf("decode heartbeat: more than %d job types", maxJobTypes)
	}
	for _, t := range hb.JobTypes {
		if t == "*" {
			continue
		}
		if msg := job.CheckText(t, job.MaxNameLen); msg != "" {
			return hb, fmt.Errorf("decode heartbeat: job type %q %s", t, msg)
		}
	}
	if hb.Prefetch < 0 || hb.Prefetch > maxConcurrency {
		return hb, fmt.Errorf("decode heartbeat: prefetch must be between 0 and %d", maxConcurrency)
	}
	if len(hb.InFlight) > 2*maxConcurrency {
		return hb, fmt.Errorf("decode heartbeat: more than %d jobs in flight", 2*maxConcurrency)
	}
	for _, f := range hb.InFlight {
		if f.JobID <= 0 || f.LeaseToken <= 0 {
			return hb, fmt.Errorf("decode heartbeat: in_flight needs a job_id and a lease_token")
		}
	}
	return hb, nil
}

// Bounds of one result batch (wire.AppendResultBatch): a batch is closed
// once it holds maxBatchResults results or maxBatchBytes bytes.
const (
	maxBatchResults = 256
	maxBatchBytes   = 1 << 20
)

// SendResults appends attempt outcomes to the results stream in one round
// trip: in batches if the leader reads them, else one entry each.
func (q *Queue) SendResults(ctx context.Context, rs []wire.Result) error {
	if len(rs) == 0 {
		return nil
	}
	codec := q.resultCodec.Load()
	pipe := q.rdb.Pipeline()
	if codec == wire.CodecBatch {
		for len(rs) > 0 {
			n, size := 0, 0
			for n < len(rs) && n < maxBatchResults && (n == 0 || size < maxBatchBytes) {
				size += len(rs[n].Result) + len(rs[n].Error) + len(rs[n].Message)
				n++
			}
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: q.keys.Results(), Values: []any{"b", wire.AppendResultBatch(nil, rs[:n])}})
			rs = rs[n:]
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("send results: %w", err)
		}
		return nil
	}
	binary := codec == wire.CodecBinary
	for i := range rs {
		var b []byte
		if binary {
			b = wire.AppendResult(nil, &rs[i])
		} else {
			var err error
			if b, err = json.Marshal(&rs[i]); err != nil {
				return fmt.Errorf("encode result %d: %w", rs[i].JobID, err)
			}
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

// ReadResults returns the results of up to max stream entries: first any
// delivered earlier but not acknowledged (pending), then new ones, blocking
// up to block (0 does not block). The results of a batch entry are adjacent
// and carry its id. An entry's id is in bad once per result of it that does
// not decode (or once if it does not decode at all): to count, then
// acknowledge. It recreates the consumer group if Redis lost it.
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
			batch := field(m.Values, "b")
			if batch == nil {
				r, err := DecodeResult(field(m.Values, "r"))
				if err != nil {
					bad = append(bad, m.ID)
					continue
				}
				rs = append(rs, ReceivedResult{ID: m.ID, Result: r})
				continue
			}
			parts, err := wire.SplitResultBatch(batch)
			if err != nil {
				bad = append(bad, m.ID)
				continue
			}
			for _, p := range parts {
				r, err := DecodeResult(p)
				if err != nil {
					bad = append(bad, m.ID) // once per bad result: counted, then acknowledged with the rest
					continue
				}
				rs = append(rs, ReceivedResult{ID: m.ID, Result: r})
			}
		}
	}
	return rs, bad, nil
}

// DecodeResult decodes and checks one result message, in the binary codec
// or JSON.
func DecodeResult(b []byte) (wire.Result, error) {
	var r wire.Result
	var err error
	if wire.IsBinary(b) {
		r, err = wire.ParseResult(b)
	} else {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		return r, fmt.Errorf("decode result: %w", err)
	}
	if r.JobID <= 0 || r.LeaseToken <= 0 {
		return r, fmt.Errorf("decode result: missing job_id or lease_token")
	}
	if msg := job.CheckText(r.WorkerID, MaxWorkerIDLen); msg != "" {
		return r, fmt.Errorf("decode result: worker_id %s", msg)
	}
	switch r.Outcome {
	case wire.OutcomeCompleted, wire.OutcomeFailed, wire.OutcomeReleased:
	case wire.OutcomeProgress:
		if r.Progress < 0 || r.Progress > wire.MaxProgress {
			return r, fmt.Errorf("decode result: progress %d out of 0..%d", r.Progress, wire.MaxProgress)
		}
		if msg := job.CheckText(r.Message, wire.MaxProgressMessage); r.Message != "" && msg != "" {
			return r, fmt.Errorf("decode result: progress message %s", msg)
		}
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

// ResultsUnappliedBy reports whether the results stream holds an entry
// that arrived in Redis at or before at (on Redis's clock, as StreamIDTime
// reads a heartbeat's) and that the leader has not applied: one its
// consumer group has not delivered yet, or delivered but not acknowledged
// (the leader acknowledges an entry once it has applied it). A worker
// sends its results before its stopped heartbeat, so none of them is
// unapplied once this says false for that heartbeat's time.
func (q *Queue) ResultsUnappliedBy(ctx context.Context, at time.Time) (bool, error) {
	key, end := q.keys.Results(), strconv.FormatInt(at.UnixMilli(), 10)
	// In this order: an entry delivered after the group's position was
	// read is found by the range, and one delivered before by XPENDING
	// unless it was acknowledged meanwhile.
	groups, err := q.rdb.XInfoGroups(ctx, key).Result()
	if err != nil && strings.Contains(err.Error(), "no such key") {
		return false, nil // no stream: no result waits
	}
	if err != nil {
		return false, fmt.Errorf("read the results group: %w", err)
	}
	var group *redis.XInfoGroup
	for i := range groups {
		if groups[i].Name == ResultsGroup {
			group = &groups[i]
		}
	}
	start := "-" // no group yet: it will read the stream from its start
	if group != nil {
		start = "(" + group.LastDeliveredID
		// The leader's pending entries only: no reader applies another
		// consumer's.
		pending, err := q.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: ResultsGroup,
			Start: "-", End: end, Count: 1, Consumer: ResultsConsumer}).Result()
		if err != nil {
			return false, fmt.Errorf("read pending results: %w", err)
		}
		if len(pending) > 0 {
			return true, nil
		}
	}
	msgs, err := q.rdb.XRangeN(ctx, key, start, end, 1).Result()
	if err != nil {
		return false, fmt.Errorf("read undelivered results: %w", err)
	}
	return len(msgs) > 0, nil
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

// The dead-letter mirror is rebuilt page by page, so that neither the
// coordinator nor one Redis command holds it whole: DeadRebuildStart,
// DeadRebuildAppend for each page (newest first), then DeadRebuildFinish,
// which swaps the new list in.

// DeadRebuildStart clears the temporary list a rebuild writes to.
func (q *Queue) DeadRebuildStart(ctx context.Context) error {
	if err := q.rdb.Del(ctx, q.keys.DeadLetterRebuild()).Err(); err != nil {
		return fmt.Errorf("start dead-letter rebuild: %w", err)
	}
	return nil
}

// DeadRebuildAppend appends one page of entries to the rebuild.
func (q *Queue) DeadRebuildAppend(ctx context.Context, es []wire.DeadEntry) error {
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
	if err := q.rdb.RPush(ctx, q.keys.DeadLetterRebuild(), vals...).Err(); err != nil {
		return fmt.Errorf("append to dead-letter rebuild: %w", err)
	}
	return nil
}

// deadSwapScript puts a rebuilt dead-letter list in place, unless a
// leader of a later epoch has already rebuilt it.
//
//	KEYS[1]  the temporary list (dead_letter_queue:rebuild)
//	KEYS[2]  the dead-letter list
//	KEYS[3]  the epoch of the leader that last rebuilt it
//	ARGV[1]  this leader's epoch
//
// Returns 1 when swapped, 0 when a later epoch's rebuild stands.
var deadSwapScript = redis.NewScript(`
local last = tonumber(redis.call('GET', KEYS[3]) or '0')
if last > tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('SET', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('RENAME', KEYS[1], KEYS[2])
else
  redis.call('DEL', KEYS[2])
end
return 1
`)

// DeadRebuildFinish replaces the dead-letter list with the rebuilt one in
// one step. A leader whose epoch is older than the last rebuilder's changes
// nothing and gets job.ErrDeposed.
func (q *Queue) DeadRebuildFinish(ctx context.Context, epoch int64) error {
	k := q.keys
	n, err := deadSwapScript.Run(ctx, q.rdb, []string{k.DeadLetterRebuild(), k.DeadLetter(), k.DeadLetterEpoch()}, epoch).Int()
	if err != nil {
		return fmt.Errorf("finish dead-letter rebuild: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("finish dead-letter rebuild: %w", job.ErrDeposed)
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
