package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

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
	if codec >= wire.CodecBatch {
		appendBatch := wire.AppendResultBatch
		if codec >= wire.CodecLogs {
			appendBatch = wire.AppendResultBatchWithLogs
		}
		for len(rs) > 0 {
			n, size := 0, 0
			for n < len(rs) && n < maxBatchResults && (n == 0 || size < maxBatchBytes) {
				size += len(rs[n].Result) + len(rs[n].Error) + len(rs[n].Message) + logsSize(rs[n].Logs)
				n++
			}
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: q.keys.Results(), Values: []any{"b", appendBatch(nil, rs[:n])}})
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

// logsSize is about what logs add to a result's binary form.
func logsSize(l *wire.Logs) int {
	if l == nil {
		return 0
	}
	n := 0
	for i := range l.Lines {
		n += len(l.Lines[i].Message) + len(l.Lines[i].Level) + 10
	}
	return n
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
	// Lines beyond the bounds are cut or dropped, never the result for
	// them: its outcome matters more than its logs.
	r.Logs.Bound()
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
