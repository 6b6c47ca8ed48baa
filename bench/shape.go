package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The experiment flags PayloadBytes, JobGroups and LimitKeys change what the
// throughput scenarios submit and which worker may take it; they are off in
// a standard run, whose jobs are {"name":"noop"} for a homogeneous fleet.

// maxBatchBody is the submitter's body limit of POST /submit_jobs
// (submitter.DefaultMaxBatchBodyBytes, which no setting changes): a batch
// of large payloads must fit it, so their batches are smaller.
const maxBatchBody = 16 << 20

// defaultMaxPayload is the submitter's default MAX_PAYLOAD_BYTES; a larger
// PayloadBytes raises it in the submitter's environment.
const defaultMaxPayload = 1 << 20

// jobShape is the job the drain and sustained scenarios submit: job i is
// named names[i mod len(names)] (one name, noop, unless JobGroups spreads
// them over noop_g0 … noop_g<G-1>) and carries payload (none when empty).
type jobShape struct {
	names   []string
	payload string // the payload's JSON, a string of PayloadBytes bytes
}

func newJobShape(cfg Config) jobShape {
	s := jobShape{names: groupNames(cfg.JobGroups)}
	if cfg.PayloadBytes > 0 {
		s.payload = `"` + incompressible(cfg.PayloadBytes-2) + `"`
	}
	return s
}

// incompressible is n pseudo-random characters of the base64 alphabet, the
// same on every run: PostgreSQL compresses a large jsonb value (TOAST), and
// a run of one letter would cost it next to nothing to store. It holds no
// '_', so no "invalid_job", which the noop handler fails.
func incompressible(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	r := rand.New(rand.NewPCG(27, 27))
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// groupNames are the job names of a fleet of groups groups: noop for a
// homogeneous fleet (0), else noop_g<g> for each group g.
func groupNames(groups int) []string {
	if groups == 0 {
		return []string{"noop"}
	}
	names := make([]string, groups)
	for g := range names {
		names[g] = "noop_g" + strconv.Itoa(g)
	}
	return names
}

// job is the JSON of job i.
func (s jobShape) job(i int64) string {
	var b bytes.Buffer
	s.writeJob(&b, i)
	return b.String()
}

func (s jobShape) writeJob(b *bytes.Buffer, i int64) {
	b.WriteString(`{"name":"`)
	b.WriteString(s.names[i%int64(len(s.names))])
	if s.payload == "" {
		b.WriteString(`"}`)
		return
	}
	b.WriteString(`","payload":`)
	b.WriteString(s.payload)
	b.WriteByte('}')
}

// body is the JSON array of jobs start … start+n-1.
func (s jobShape) body(start int64, n int) []byte {
	var b bytes.Buffer
	b.Grow(n * (s.longestJob() + 1))
	b.WriteByte('[')
	for i := range int64(n) {
		if i > 0 {
			b.WriteByte(',')
		}
		s.writeJob(&b, start+i)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// longestJob is the length of the longest job's JSON.
func (s jobShape) longestJob() int {
	longest := 0
	for _, name := range s.names {
		longest = max(longest, len(name))
	}
	n := len(`{"name":""}`) + longest
	if s.payload != "" {
		n += len(`,"payload":`) + len(s.payload)
	}
	return n
}

// fitBatch is the most jobs of the shape a body within maxBatchBody holds
// (0 if not even one fits), at most want.
func (s jobShape) fitBatch(want int) int {
	// '[' + n jobs + n-1 commas + ']'
	return min(want, (maxBatchBody-1)/(s.longestJob()+1))
}

// batches hands out the bodies of consecutive batches of a shape: batch k
// holds jobs k·size … k·size+size-1, so the names stay evenly spread over
// any run of batches. Full batches differ only by their first name, so
// they are built once each while they fit in maxCachedBodies bytes (one
// body for a homogeneous fleet), else for each batch.
type batches struct {
	shape jobShape
	size  int

	mu    sync.Mutex
	cache map[int64][]byte
	bytes int
}

const maxCachedBodies = 64 << 20

func newBatches(shape jobShape, size int) *batches {
	return &batches{shape: shape, size: size, cache: map[int64][]byte{}}
}

// body is batch k's body, of n jobs (n < size only for a last batch).
func (b *batches) body(k int64, n int) []byte {
	start := k * int64(b.size)
	if n != b.size {
		return b.shape.body(start, n)
	}
	key := start % int64(len(b.shape.names))
	b.mu.Lock()
	defer b.mu.Unlock()
	if body, ok := b.cache[key]; ok {
		return body
	}
	body := b.shape.body(start, n)
	if b.bytes+len(body) <= maxCachedBodies || len(b.cache) == 0 {
		b.cache[key] = body
		b.bytes += len(body)
	}
	return body
}

// limitKey is the name of the i-th limit key of LimitKeys.
func limitKey(i int) string { return "bench-key-" + strconv.Itoa(i) }

// LimitSetup is what LimitKeys set up before the scenarios: each key has a
// limit of one start a day and two jobs; the first completed, the second
// waits all run, so the leader runs the limited claim in every round while
// the scenarios' unlimited jobs flow. The scenarios' counts leave these
// jobs out.
type LimitSetup struct {
	Keys int `json:"keys"`
	// Seconds is the setup's length: the limits set, the jobs submitted
	// and the first job of every key completed.
	Seconds float64 `json:"seconds"`
	// WaitingEnd is how many of the keys' jobs still waited (pending) when
	// the scenarios ended: Keys, unless a limit failed to hold.
	WaitingEnd int64 `json:"waiting_at_end"`
}

// setupJobs are the jobs the bench made before the scenarios (LimitKeys),
// which the scenarios' counts leave out: every id up to lastID, of which
// waiting stay pending and completed stay completed.
type setupJobs struct {
	lastID    int64
	waiting   int64
	completed int64
}

// setupLimits gives each of LimitKeys keys a limit of one start a day and
// two jobs under it, and waits until the first of each has completed
// (with the fleet running; the drain scenario stops it again).
func setupLimits(ctx context.Context, c *cluster) (*LimitSetup, error) {
	cfg := c.cfg
	res := &LimitSetup{Keys: cfg.LimitKeys}
	t0 := time.Now()
	if len(c.runningWorkers()) == 0 {
		if _, err := c.startWorkers(ctx, cfg.Workers, cfg.Concurrency, nil); err != nil {
			return res, err
		}
	}
	c.log.Info("limit keys: setting limits", "keys", cfg.LimitKeys)
	if err := setLimits(ctx, c, cfg.LimitKeys); err != nil {
		return res, err
	}
	names := groupNames(cfg.JobGroups)
	job := func(i int64) string { // jobs 2k and 2k+1 are key k's
		k := int(i / 2)
		return `{"name":"` + names[k%len(names)] + `","concurrency_key":"` + limitKey(k) + `"}`
	}
	body := func(k int64, n int) []byte {
		var b bytes.Buffer
		b.WriteByte('[')
		for i := range int64(n) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(job(k*int64(cfg.BatchSize) + i))
		}
		b.WriteByte(']')
		return b.Bytes()
	}
	n, lastID, err := submitN(ctx, c, 2*cfg.LimitKeys, body)
	if err != nil {
		return res, fmt.Errorf("submit the limited jobs: %w", err)
	}
	c.log.Info("limit keys: submitted, waiting for the first job of each key", "jobs", n)
	deadline := time.Now().Add(cfg.DrainTimeout)
	for {
		st, err := c.pg.statusCountsUpTo(ctx, lastID)
		if err != nil {
			return res, err
		}
		done, waiting := st["completed"], st["pending"]
		if done == int64(cfg.LimitKeys) && waiting == int64(cfg.LimitKeys) {
			break
		}
		if done > int64(cfg.LimitKeys) {
			return res, fmt.Errorf("%d limited jobs completed, more than the %d keys' limits allow (%v)", done, cfg.LimitKeys, st)
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("limited jobs by status after %v: %v, want %d completed and %d pending", cfg.DrainTimeout, st, cfg.LimitKeys, cfg.LimitKeys)
		}
		if err := c.checkAlive(); err != nil {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(cfg.PollInterval):
		}
	}
	c.pg.setup = setupJobs{lastID: lastID, waiting: int64(cfg.LimitKeys), completed: int64(cfg.LimitKeys)}
	res.Seconds = time.Since(t0).Seconds()
	c.log.Info("limit keys: set up", "keys", cfg.LimitKeys, "seconds", round(res.Seconds, 1))
	return res, nil
}

// setLimits sets n limit keys' limit to one start a day, with
// limitConns requests in flight: each is a transaction of its own (the
// limit and its audit row), so more in flight share the commits.
func setLimits(ctx context.Context, c *cluster, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	body := []byte(`{"rate":1,"period_seconds":86400}`)
	for range limitConns {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n) && ctx.Err() == nil; i = next.Add(1) - 1 {
				if err := c.client.put(ctx, "/limits/"+limitKey(int(i)), body); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

const limitConns = 16

// GroupResult is one group of a mixed fleet (JobGroups): the jobs of its
// name the scenarios completed, and by whom.
type GroupResult struct {
	Name string `json:"name"`
	// Workers is the number of workers of the group in each fleet the
	// bench started.
	Workers   int   `json:"workers"`
	Completed int64 `json:"completed"`
	// ByOthers counts its jobs completed by a worker outside the group: 0
	// unless the leader gave a job to a worker that does not handle it.
	ByOthers int64 `json:"completed_by_other_workers"`
}

// groupResults counts the scenarios' completed jobs by group.
func groupResults(ctx context.Context, c *cluster) ([]GroupResult, error) {
	names := groupNames(c.cfg.JobGroups)
	out := make([]GroupResult, len(names))
	index := map[string]int{}
	for g, name := range names {
		out[g] = GroupResult{Name: name, Workers: c.cfg.Workers / len(names)}
		if g < c.cfg.Workers%len(names) {
			out[g].Workers++
		}
		index[name] = g
	}
	counts, err := c.pg.completedByWorker(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range counts {
		g, ok := index[n.name]
		if !ok {
			continue
		}
		out[g].Completed += n.count
		if c.jobNames[n.workerID] != n.name {
			out[g].ByOthers += n.count
		}
	}
	return out, nil
}
