package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dtsched/dts/internal/retry"
)

// LatencyRun is one offered load of the latency scenario: single noop jobs
// through POST /submit_job on a fixed schedule (open loop: a request is due
// at start + k/rate whatever happened to the previous ones).
type LatencyRun struct {
	Label        string  `json:"label"`
	TargetRate   float64 `json:"target_rate"`
	AchievedRate float64 `json:"achieved_rate"`
	Seconds      float64 `json:"seconds"`
	Submitted    int     `json:"submitted"`
	Errors       int64   `json:"errors"`
	// Late counts requests that were due while LatencyConns requests were
	// in flight and as many more waiting; they were not sent.
	Late int64 `json:"late"`
	// SubmitToStart is started_at − created_at and SubmitToFinish
	// finished_at − created_at, both from PostgreSQL, over the run's jobs.
	SubmitToStart  Percentiles `json:"submit_to_start"`
	SubmitToFinish Percentiles `json:"submit_to_finish"`
	// HTTP is the submit request's round trip seen by the bench.
	HTTP Percentiles `json:"http"`
	// MetricsQueueWaitMs and MetricsEndToEndMs are the means of the
	// coordinator's dts_queue_wait_seconds and dts_end_to_end_seconds
	// histograms over the run, as a cross-check.
	MetricsQueueWaitMs float64 `json:"metrics_queue_wait_mean_ms"`
	MetricsEndToEndMs  float64 `json:"metrics_end_to_end_mean_ms"`
	// MetricsClaimMs and MetricsDeliverMs are the means of the coordinator's
	// dts_dispatch_step_seconds for the claim statement and the Redis
	// delivery over the run: the dispatch round's two steps.
	MetricsClaimMs   float64 `json:"metrics_claim_mean_ms"`
	MetricsDeliverMs float64 `json:"metrics_deliver_mean_ms"`
	// Resources is every process's CPU and memory during the submits:
	// how much of the machine this offered load takes.
	Resources Usage `json:"resources"`
}

type latencyTarget struct {
	label string
	rate  float64
}

// latencyTargets lists the offered loads: the configured rates, then half
// the sustained scenario's completed rate, each capped by LatencyMaxRate.
func latencyTargets(cfg Config, sus *SustainedResult) []latencyTarget {
	capped := func(r float64) float64 {
		if cfg.LatencyMaxRate > 0 {
			return min(r, cfg.LatencyMaxRate)
		}
		return r
	}
	var out []latencyTarget
	for _, r := range cfg.LatencyRates {
		out = append(out, latencyTarget{fmt.Sprintf("%g/s", r), capped(r)})
	}
	if !cfg.NoHalfMax && sus != nil && sus.CompletedRate > 0 {
		half := math.Round(sus.CompletedRate / 2)
		label := fmt.Sprintf("50%% of max (%g/s)", half)
		if r := capped(half); r != half {
			label, half = fmt.Sprintf("50%% of max, capped (%g/s)", r), r
		}
		out = append(out, latencyTarget{label, half})
	}
	return out
}

func runLatency(ctx context.Context, c *cluster, targets []latencyTarget) ([]LatencyRun, error) {
	if len(c.runningWorkers()) == 0 {
		if _, err := c.startWorkers(ctx, c.cfg.Workers, c.cfg.Concurrency, nil); err != nil {
			return nil, err
		}
	}
	var runs []LatencyRun
	for _, t := range targets {
		c.log.Info("latency: offering single-job submits", "rate", t.rate, "seconds", c.cfg.LatencyDuration.Seconds())
		r, err := latencyRun(ctx, c, t)
		if err != nil {
			return runs, fmt.Errorf("at %g/s: %w", t.rate, err)
		}
		c.log.Info("latency: done", "rate", t.rate, "p99_submit_to_start_ms", round(r.SubmitToStart.P99, 2),
			"p99_submit_to_finish_ms", round(r.SubmitToFinish.P99, 2))
		runs = append(runs, r)
	}
	return runs, nil
}

func latencyRun(ctx context.Context, c *cluster, t latencyTarget) (LatencyRun, error) {
	cfg := c.cfg
	run := LatencyRun{Label: t.label, TargetRate: t.rate}
	before, err := c.client.scrape(ctx, c.coordinator().URL)
	if err != nil {
		return run, err
	}
	// Without PayloadBytes's payload (single 1 MiB jobs at these rates
	// would measure the network), but spread over JobGroups's names.
	names := groupNames(cfg.JobGroups)
	bodies := make([][]byte, len(names))
	for i := range names {
		bodies[i] = []byte(jobShape{names: names}.job(int64(i)))
	}
	var seq atomic.Int64
	due := make(chan struct{}, cfg.LatencyConns)
	var (
		mu      sync.Mutex
		ids     []int64
		httpLat []float64
		errs    atomic.Int64
		wg      sync.WaitGroup
	)
	for range cfg.LatencyConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range due {
				t0 := time.Now()
				id, err := c.client.submitOne(ctx, bodies[(seq.Add(1)-1)%int64(len(bodies))])
				d := time.Since(t0).Seconds()
				if err != nil {
					errs.Add(1)
					continue
				}
				mu.Lock()
				ids, httpLat = append(ids, id), append(httpLat, d)
				mu.Unlock()
			}
		}()
	}
	total := int(t.rate * cfg.LatencyDuration.Seconds())
	var late int64
	s := c.newSampler()
	s.start()
	start := time.Now()
	for k := 0; k < total && ctx.Err() == nil; {
		// Every request due by now, then sleep until the next is due.
		now := int(time.Since(start).Seconds()*t.rate) + 1
		for ; k < min(now, total); k++ {
			select {
			case due <- struct{}{}:
			default:
				late++
			}
		}
		_ = retry.Sleep(ctx, time.Until(start.Add(time.Duration(float64(k)/t.rate*float64(time.Second)))))
	}
	close(due)
	wg.Wait()
	run.Seconds = time.Since(start).Seconds()
	run.Resources = s.stop(int64(len(ids)))
	sortUse(&run.Resources)
	run.Submitted, run.Errors, run.Late = len(ids), errs.Load(), late
	run.AchievedRate = float64(len(ids)) / cfg.LatencyDuration.Seconds()
	run.HTTP = percentiles(httpLat)
	if err := ctx.Err(); err != nil {
		return run, err
	}
	if len(ids) == 0 {
		return run, fmt.Errorf("no submit succeeded (%d errors)", run.Errors)
	}
	if err := waitFinished(ctx, c, ids, time.Minute); err != nil {
		return run, err
	}
	toStart, toFinish, err := c.pg.jobDelays(ctx, ids)
	if err != nil {
		return run, err
	}
	run.SubmitToStart, run.SubmitToFinish = percentiles(toStart), percentiles(toFinish)
	if after, err := c.client.scrape(ctx, c.coordinator().URL); err == nil {
		qw, _ := mean(before, after, "dts_queue_wait_seconds")
		e2e, _ := mean(before, after, "dts_end_to_end_seconds")
		run.MetricsQueueWaitMs, run.MetricsEndToEndMs = 1000*qw, 1000*e2e
		claim, _ := mean(before, after, `dts_dispatch_step_seconds{step="claim"}`)
		deliver, _ := mean(before, after, `dts_dispatch_step_seconds{step="deliver"}`)
		run.MetricsClaimMs, run.MetricsDeliverMs = 1000*claim, 1000*deliver
	}
	return run, nil
}

// waitFinished polls until every one of ids has a finished_at.
func waitFinished(ctx context.Context, c *cluster, ids []int64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		n, err := c.pg.unfinished(ctx, ids)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("%d of %d jobs unfinished after %v", n, len(ids), timeout)
			}
			return ctx.Err()
		case <-time.After(c.cfg.PollInterval):
		}
	}
}
