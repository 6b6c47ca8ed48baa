// Package prefetch is the rule by which a worker's prefetch follows its
// jobs (worker.Config.PrefetchMax): how much it holds beyond its slots, how
// often it looks, and when it says so before its next heartbeat. The
// worker and the bench's simulated fleet both use it, so a simulated worker
// asks the leader for what a real one would.
package prefetch

import "time"

// Window is how much of its own work, in time, a worker whose prefetch
// adapts holds beyond its slots. A freed slot waits for its next job for
// as long as the result takes to reach the leader and the next delivery to
// come back: a few milliseconds on one idle host, more than 100 ms with a
// busy leader across a 1 ms link (docs/benchmarks.md, make up's shape over
// the link). Little's law: the jobs needed to cover that wait are the rate
// times the wait.
const Window = 250 * time.Millisecond

// Sample is how often an adaptive prefetch is sampled between heartbeats.
// A quarter of the window: a burst's first samples see the prefetch of the
// quiet spell before it, so each step up waits a sample, and with samples
// a window long, a burst of no-op jobs over a 1 ms link spent half a
// second of its ramp on two steps (docs/benchmarks.md).
const Sample = Window / 4

// Bounds are a worker's prefetch settings: Min is the fixed prefetch, and
// the prefetch adapts up to Max when Max is above it.
type Bounds struct{ Min, Max int }

// Adapt returns the prefetch for a worker that finished done attempts in
// the last elapsed: Window of them, within b; b.Min if it does not adapt.
func (b Bounds) Adapt(done int64, elapsed time.Duration) int {
	if b.Max <= b.Min || elapsed <= 0 {
		return b.Min
	}
	want := int(float64(done) * float64(Window) / float64(elapsed))
	return min(max(want, b.Min), b.Max)
}

// Early returns the prefetch that a sample of done completions in elapsed
// asks for, and whether a heartbeat should say it at once: when it is at
// least twice the prefetch the last heartbeat said, or the most the worker
// may hold (a step from above half of Max up to it would otherwise wait
// for the next regular heartbeat). Smaller steps wait: each early
// heartbeat costs the leader a read. Once a heartbeat said Max none comes
// early until a regular one says less, so a worker whose samples reach
// the bound and whose intervals do not sends at most one early heartbeat
// per interval.
func (b Bounds) Early(said int, done int64, elapsed time.Duration) (int, bool) {
	p := b.Adapt(done, elapsed)
	return p, p > said && (p >= 2*said || p == b.Max)
}
