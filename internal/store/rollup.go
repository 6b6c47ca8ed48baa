package store

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// MaxRollupNames is how many job names get rows of their own in one
// minute of the rollup (the busiest); every name counts in the total row.
const MaxRollupNames = 50

// RollupRow is one minute of the rollup (migrations/011_rollup.up.sql):
// for one job name, or for every name together when Name is "".
type RollupRow struct {
	Minute    time.Time
	Name      string
	Completed int64
	Failed    int64
	Started   int64
	// StartP50, StartP95: submit-to-start of the jobs started in the
	// minute, in milliseconds; nil when none started.
	StartP50, StartP95 *float64
	// QueueDepth, OldestPending: the due jobs and the oldest one's wait in
	// seconds, when the row was written.
	QueueDepth    int64
	OldestPending float64
}

// RollupWrite writes the rows of the minute that starts at minute (which
// must have ended, and is truncated to the minute), as the leader of
// epoch: the total row always, and one row for each of the
// MaxRollupNames busiest names. Rows of that minute already written are
// kept. It returns how many rows it wrote.
//
// The minute's jobs are read as counts per name and bucket of
// submit-to-start time (RollupWriteEnded; the due jobs RollupWriteDue),
// in one round trip, and the percentiles are taken from the buckets here
// (bucketPercentile). The statement that took them exactly, with
// percentile_cont over every started job, sorts the minute's jobs on
// disk, which at a high rate costs PostgreSQL several seconds of CPU a
// minute (docs/benchmarks.md).
func (s *Store) RollupWrite(ctx context.Context, epoch int64, minute time.Time) (int64, error) {
	minute = minute.Truncate(time.Minute)
	b := &pgx.Batch{}
	b.Queue(q("RollupWriteEnded"), minute, rollupMinMillis, rollupBucketsPerE)
	b.Queue(q("RollupWriteDue"))
	br := s.pool.SendBatch(ctx, b)
	rows, err := readRollup(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = interpretError(cerr)
	}
	if err != nil {
		return 0, fmt.Errorf("write the rollup of %s: %w", minute.UTC().Format("15:04"), err)
	}
	var in rollupInsert
	for _, r := range rows {
		in.add(r)
	}
	tag, err := s.pool.Exec(ctx, q("RollupWriteInsert"), minute, epoch, in.names, in.completed, in.failed, in.started,
		in.p50, in.p95, in.depth, in.oldest)
	if err != nil {
		return 0, fmt.Errorf("write the rollup of %s: %w", minute.UTC().Format("15:04"), interpretError(err))
	}
	return tag.RowsAffected(), nil
}

// rollupName gathers one name's counts (or the total's).
type rollupName struct {
	row   RollupRow
	waits map[int]int64 // started jobs per bucket
}

// readRollup reads the minute's counts and returns its rows: the total
// (name "") first, then the MaxRollupNames busiest names (most completed,
// failed, started and due together; then by name).
func readRollup(br pgx.BatchResults) ([]RollupRow, error) {
	total := &rollupName{waits: map[int]int64{}}
	byName := map[string]*rollupName{}
	named := func(name string) *rollupName {
		n := byName[name]
		if n == nil {
			n = &rollupName{row: RollupRow{Name: name}, waits: map[int]int64{}}
			byName[name] = n
		}
		return n
	}
	rows, err := br.Query()
	if err != nil {
		return nil, interpretError(err)
	}
	var name string
	var bucket *int32
	var completed, failed, started int64
	_, err = pgx.ForEachRow(rows, []any{&name, &bucket, &completed, &failed, &started}, func() error {
		for _, n := range []*rollupName{total, named(name)} {
			n.row.Completed += completed
			n.row.Failed += failed
			n.row.Started += started
			if bucket != nil {
				n.waits[int(*bucket)] += started
			}
		}
		return nil
	})
	if err != nil {
		return nil, interpretError(err)
	}
	rows, err = br.Query()
	if err != nil {
		return nil, interpretError(err)
	}
	var depth int64
	var oldest float64
	_, err = pgx.ForEachRow(rows, []any{&name, &depth, &oldest}, func() error {
		for _, n := range []*rollupName{total, named(name)} {
			n.row.QueueDepth += depth
			n.row.OldestPending = max(n.row.OldestPending, oldest)
		}
		return nil
	})
	if err != nil {
		return nil, interpretError(err)
	}
	names := make([]*rollupName, 0, len(byName))
	for _, n := range byName {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b *rollupName) int {
		return cmp.Or(cmp.Compare(b.row.busy(), a.row.busy()), cmp.Compare(a.row.Name, b.row.Name))
	})
	names = names[:min(len(names), MaxRollupNames)]
	out := make([]RollupRow, 0, 1+len(names))
	for _, n := range append([]*rollupName{total}, names...) {
		n.row.StartP50, n.row.StartP95 = bucketPercentile(n.waits, 0.5), bucketPercentile(n.waits, 0.95)
		out = append(out, n.row)
	}
	return out, nil
}

// busy orders the names of a minute: the busiest get rows of their own.
func (r RollupRow) busy() int64 { return r.Completed + r.Failed + r.Started + r.QueueDepth }

// The buckets of submit-to-start time (RollupWriteEnded): bucket b holds the
// waits w (in milliseconds, rollupMinMillis at least) with
// floor(ln(w) * rollupBucketsPerE) = b, so its bounds are a factor
// e^(1/100) = 1.01 apart, and the middle of a bucket is within 0.5 % of
// every wait in it. A percentile taken from the middles is within 0.5 %
// of the exact one.
const (
	rollupBucketsPerE = 100
	rollupMinMillis   = 0.001
)

// rollupBucket returns the middle of bucket b (geometric), in
// milliseconds.
func rollupBucket(b int) float64 {
	return math.Exp((float64(b) + 0.5) / rollupBucketsPerE)
}

// bucketPercentile returns the p-th percentile (0..1) of the waits counted
// per bucket, each wait taken as its bucket's middle and interpolated
// between neighbours the way PostgreSQL's percentile_cont does; nil when
// there are none.
func bucketPercentile(counts map[int]int64, p float64) *float64 {
	var n int64
	buckets := make([]int, 0, len(counts))
	for b, c := range counts {
		if c > 0 {
			buckets = append(buckets, b)
			n += c
		}
	}
	if n == 0 {
		return nil
	}
	slices.Sort(buckets)
	// at returns the value of rank k (0-based) in the sorted waits.
	at := func(k int64) float64 {
		for _, b := range buckets {
			if k < counts[b] {
				return rollupBucket(b)
			}
			k -= counts[b]
		}
		return rollupBucket(buckets[len(buckets)-1])
	}
	pos := p * float64(n-1)
	lo := int64(math.Floor(pos))
	v := at(lo)
	if frac := pos - float64(lo); frac > 0 {
		v += (at(lo+1) - v) * frac
	}
	return &v
}

// RollupCleanup deletes the rollup rows older than age, as the leader of
// epoch, and returns how many it deleted.
func (s *Store) RollupCleanup(ctx context.Context, epoch int64, age time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, q("RollupCleanup"), millis(age), epoch)
	if err != nil {
		return 0, fmt.Errorf("clean up the rollup: %w", interpretError(err))
	}
	return tag.RowsAffected(), nil
}

// RollupRange returns the rollup rows of the minutes from since on,
// oldest first, every name's.
func (s *Store) RollupRange(ctx context.Context, since time.Time) ([]RollupRow, error) {
	rows, err := s.pool.Query(ctx, q("RollupRange"), since)
	if err != nil {
		return nil, fmt.Errorf("read the rollup: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RollupRow, error) {
		var v RollupRow
		err := r.Scan(&v.Minute, &v.Name, &v.Completed, &v.Failed, &v.Started, &v.StartP50, &v.StartP95,
			&v.QueueDepth, &v.OldestPending)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the rollup: %w", interpretError(err))
	}
	return out, nil
}

// rollupInsert holds a minute's rows as the columns RollupWriteInsert takes.
type rollupInsert struct {
	names                      []string
	completed, failed, started []int64
	p50, p95                   []*float64
	depth                      []int64
	oldest                     []float64
}

func (in *rollupInsert) add(r RollupRow) {
	in.names = append(in.names, r.Name)
	in.completed = append(in.completed, r.Completed)
	in.failed = append(in.failed, r.Failed)
	in.started = append(in.started, r.Started)
	in.p50 = append(in.p50, r.StartP50)
	in.p95 = append(in.p95, r.StartP95)
	in.depth = append(in.depth, r.QueueDepth)
	in.oldest = append(in.oldest, r.OldestPending)
}
