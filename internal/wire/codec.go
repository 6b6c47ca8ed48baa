package wire

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"
)

// The binary codec of the two hot Redis hops: deliveries (coordinator →
// worker) and results (worker → coordinator). JSON stays the format of
// everything else, and of these two messages for peers that do not speak
// the codec: a decoder tells the two apart by the first byte ('{' for
// JSON, BinaryMagic for this codec).
//
// Why: decoding these two messages with encoding/json was a fifth of the
// leader coordinator's CPU and a sixth of each worker's under load
// (docs/benchmarks.md, "Binary codec").
//
// Who speaks it: a worker announces CodecBinary in its heartbeats; the
// coordinator then delivers to it in this codec, and a worker sends its
// results in the codec of the latest delivery it received: JSON until a
// binary one comes, and JSON again after a JSON one (a JSON-only leader
// took over, as in a rollback). Upgrade the coordinators before the
// workers: a new worker's results reach an old coordinator only after a
// new one has delivered to it.
//
// Layout. Integers are unsigned varints (encoding/binary), times are
// signed varints of Unix nanoseconds (0 is the zero time), and a string or
// byte string is its length as a varint followed by its bytes.
//
//	delivery: BinaryMagic, lease token in decimal ASCII, 0x00, job id, name,
//	          queue, payload, attempt, max retries, timeout seconds, created at
//	result:   BinaryMagic, job id, lease token, worker id, attempt, outcome,
//	          result, error, reason, progress, message, started at, finished at
//
// A delivery's token leads in text so that the Lua script that removes
// deliveries by token (queue.RemoveDeliveries) can read it without a
// decoder of its own.
//
// Result batches. A worker that announces CodecBatch and has received a
// delivery that starts with BatchMagic (its leader reads batches) sends
// the results it has ready as one stream entry (field "b") instead of one
// entry each: BatchMagic, the count, then per result its length as a
// varint and its binary form as above. Each stream entry costs Redis an
// XADD, an entry in the consumer group's pending list, an XACK and an
// XDEL, and the leader a parsed reply: per result, that was most of
// Redis's CPU under load (docs/benchmarks.md). A delivery in BinaryMagic
// (an older leader) turns the worker back to one entry per result.
//
//	batch:    BatchMagic, count, then count times: length, result
//
// Logs. A worker that announces CodecLogs and has received a delivery
// that starts with LogsMagic (its leader reads results with logs) may end
// a result's binary form with its Logs: after finished at, the dropped
// count, the line count, then per line its time, level and message. A
// result without logs ends at finished at, as before. An older leader
// refuses trailing bytes, so a worker whose leader did not say it reads
// them leaves them out (or sends JSON, whose unknown fields any leader
// ignores).
//
//	logs:     dropped, count, then count times: time, level, message
//
// Trace context. A delivery to a worker that announces CodecTrace may end,
// after created at, with the job's W3C traceparent as a string. An older
// worker refuses trailing bytes, so the leader adds it only for a worker
// that announced CodecTrace, and only when the job has a trace.
//
//	trace:    traceparent

// Codecs a worker can announce in Heartbeat.Codec.
const (
	CodecJSON   = 0 // JSON only (workers before the binary codec)
	CodecBinary = 1 // also the binary codec of this file
	CodecBatch  = 2 // also result batches
	CodecLogs   = 3 // also results that end with logs
	CodecTrace  = 4 // also deliveries that end with a trace context
)

// BinaryMagic is the first byte of every binary-coded message but those
// below.
const BinaryMagic = 0x01

// BatchMagic is the first byte of a delivery from a leader that reads
// result batches, and of a result batch.
const BatchMagic = 0x02

// LogsMagic is the first byte of a delivery from a leader that reads
// result batches whose results may end with logs.
const LogsMagic = 0x03

// IsBinary reports whether b is a binary-coded message.
func IsBinary(b []byte) bool {
	return len(b) > 0 && (b[0] == BinaryMagic || b[0] == BatchMagic || b[0] == LogsMagic)
}

var errShort = errors.New("truncated message")

// AppendDelivery appends the binary form of d to b.
func AppendDelivery(b []byte, d *Delivery) []byte { return appendDelivery(b, BinaryMagic, d) }

// AppendDeliveryForBatches appends the binary form of d to b, marked as
// from a leader that reads result batches.
func AppendDeliveryForBatches(b []byte, d *Delivery) []byte { return appendDelivery(b, BatchMagic, d) }

// AppendDeliveryForLogs appends the binary form of d to b, marked as from
// a leader that reads result batches with logs.
func AppendDeliveryForLogs(b []byte, d *Delivery) []byte { return appendDelivery(b, LogsMagic, d) }

// DeliverySizeBound is at least the length of d's binary form, its trace
// context included: the fixed fields take at most 128 bytes.
func DeliverySizeBound(d *Delivery) int {
	return 128 + len(d.Name) + len(d.Queue) + len(d.Payload) + len(d.TraceParent)
}

func appendDelivery(b []byte, magic byte, d *Delivery) []byte {
	b = append(b, magic)
	b = strconv.AppendInt(b, d.LeaseToken, 10)
	b = append(b, 0)
	b = binary.AppendUvarint(b, uint64(d.JobID))
	b = appendString(b, d.Name)
	b = appendString(b, d.Queue)
	b = appendBytes(b, d.Payload)
	b = binary.AppendUvarint(b, uint64(d.Attempt))
	b = binary.AppendUvarint(b, uint64(d.MaxRetries))
	b = binary.AppendUvarint(b, uint64(d.TimeoutSeconds))
	return appendTime(b, d.CreatedAt)
}

// AppendDeliveryTrace ends the binary delivery b (from one of the
// functions above) with d's trace context, when it has one: only for a
// worker that announced CodecTrace.
func AppendDeliveryTrace(b []byte, d *Delivery) []byte {
	if d.TraceParent == "" {
		return b
	}
	return appendString(b, d.TraceParent)
}

// ParseDelivery decodes the binary form of a delivery. The payload shares
// b's memory.
func ParseDelivery(b []byte) (Delivery, error) {
	var d Delivery
	if !IsBinary(b) {
		return d, errors.New("not a binary message")
	}
	end := 1
	for end < len(b) && b[end] != 0 {
		end++
	}
	if end == len(b) {
		return d, errShort
	}
	tok, err := strconv.ParseInt(string(b[1:end]), 10, 64)
	if err != nil {
		return d, errors.New("bad lease token")
	}
	r := reader{b: b[end+1:]}
	d.LeaseToken = tok
	d.JobID = r.int64()
	d.Name = r.string()
	d.Queue = r.string()
	d.Payload = r.bytes()
	d.Attempt = r.int()
	d.MaxRetries = r.int()
	d.TimeoutSeconds = r.int()
	d.CreatedAt = r.time()
	if r.err == nil && len(r.b) > 0 {
		d.TraceParent = r.string()
	}
	return d, r.done()
}

// AppendResult appends the binary form of r to b, without its logs.
func AppendResult(b []byte, r *Result) []byte {
	b = append(b, BinaryMagic)
	b = binary.AppendUvarint(b, uint64(r.JobID))
	b = binary.AppendUvarint(b, uint64(r.LeaseToken))
	b = appendString(b, r.WorkerID)
	b = binary.AppendUvarint(b, uint64(r.Attempt))
	b = appendString(b, r.Outcome)
	b = appendBytes(b, r.Result)
	b = appendString(b, r.Error)
	b = appendString(b, r.Reason)
	b = binary.AppendUvarint(b, uint64(r.Progress))
	b = appendString(b, r.Message)
	b = appendTime(b, r.StartedAt)
	return appendTime(b, r.FinishedAt)
}

// AppendResultWithLogs appends the binary form of r to b, with its logs
// when it has any: only for a leader that reads them (LogsMagic).
func AppendResultWithLogs(b []byte, r *Result) []byte {
	b = AppendResult(b, r)
	if r.Logs == nil {
		return b
	}
	b = binary.AppendUvarint(b, uint64(max(r.Logs.Dropped, 0)))
	b = binary.AppendUvarint(b, uint64(len(r.Logs.Lines)))
	for i := range r.Logs.Lines {
		l := &r.Logs.Lines[i]
		b = appendTime(b, l.Time)
		b = appendString(b, l.Level)
		b = appendString(b, l.Message)
	}
	return b
}

// ParseResult decodes the binary form of a result. Result shares b's
// memory.
func ParseResult(b []byte) (Result, error) {
	var res Result
	if len(b) == 0 || b[0] != BinaryMagic {
		return res, errors.New("not a binary result")
	}
	r := reader{b: b[1:]}
	res.JobID = r.int64()
	res.LeaseToken = r.int64()
	res.WorkerID = r.string()
	res.Attempt = r.int()
	res.Outcome = r.string()
	res.Result = r.bytes()
	res.Error = r.string()
	res.Reason = r.string()
	res.Progress = r.int()
	res.Message = r.string()
	res.StartedAt = r.time()
	res.FinishedAt = r.time()
	if r.err == nil && len(r.b) > 0 {
		res.Logs = r.logs()
	}
	return res, r.done()
}

// logs reads the logs section of a result.
func (r *reader) logs() *Logs {
	l := &Logs{Dropped: r.int64()}
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b))/3 {
		r.fail("line count beyond the result's length") // each line takes at least 3 bytes
	}
	if r.err != nil {
		return nil
	}
	l.Lines = make([]LogLine, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		l.Lines = append(l.Lines, LogLine{Time: r.time(), Level: r.string(), Message: r.string()})
	}
	return l
}

// AppendResultBatch appends a batch of the results rs to b (an empty
// batch for no result), without their logs.
func AppendResultBatch(b []byte, rs []Result) []byte { return appendResultBatch(b, rs, AppendResult) }

// AppendResultBatchWithLogs appends a batch of the results rs to b, with
// their logs: only for a leader that reads them (LogsMagic).
func AppendResultBatchWithLogs(b []byte, rs []Result) []byte {
	return appendResultBatch(b, rs, AppendResultWithLogs)
}

func appendResultBatch(b []byte, rs []Result, appendOne func([]byte, *Result) []byte) []byte {
	b = append(b, BatchMagic)
	b = binary.AppendUvarint(b, uint64(len(rs)))
	var one []byte
	for i := range rs {
		one = appendOne(one[:0], &rs[i])
		b = appendBytes(b, one)
	}
	return b
}

// IsResultBatch reports whether b is a result batch.
func IsResultBatch(b []byte) bool { return len(b) > 0 && b[0] == BatchMagic }

// SplitResultBatch returns the binary form of each result of a batch, for
// ParseResult; they share b's memory. A batch that is cut short, holds an
// empty entry or trailing bytes is refused whole.
func SplitResultBatch(b []byte) ([][]byte, error) {
	if !IsResultBatch(b) {
		return nil, errors.New("not a result batch")
	}
	r := reader{b: b[1:]}
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.fail("count beyond the batch's length") // each result takes at least a byte
	}
	var out [][]byte
	if r.err == nil {
		out = make([][]byte, 0, n)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		one := r.bytes()
		if r.err == nil && len(one) == 0 {
			r.fail("empty result in batch")
		}
		out = append(out, one)
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return out, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return binary.AppendVarint(b, 0)
	}
	return binary.AppendVarint(b, t.UnixNano())
}

// reader decodes fields in order; the first error sticks and every later
// field reads as zero, so a caller checks once, at the end (done).
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

// int64 reads a value that must fit a non-negative int64.
func (r *reader) int64() int64 {
	v := r.uvarint()
	if v > 1<<63-1 {
		r.fail("integer out of range")
		return 0
	}
	return int64(v)
}

// int reads a value that must fit a non-negative int32 (attempts, retries,
// seconds, a percentage).
func (r *reader) int() int {
	v := r.uvarint()
	if v > 1<<31-1 {
		r.fail("integer out of range")
		return 0
	}
	return int(v)
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	if n == 0 {
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string { return string(r.bytes()) }

func (r *reader) time() time.Time {
	if r.err != nil {
		return time.Time{}
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShort
		return time.Time{}
	}
	r.b = r.b[n:]
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}

func (r *reader) fail(msg string) {
	if r.err == nil {
		r.err = errors.New(msg)
	}
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = errors.New("trailing bytes")
	}
	return r.err
}
