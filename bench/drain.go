package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// noopJob is the job every throughput scenario submits by default: the
// worker's built-in noop handler returns at once, so what is measured is
// the scheduler's own cost per job. PayloadBytes and JobGroups change it
// (jobShape).
const noopJob = `{"name":"noop"}`

// DrainResult is the drain scenario: DrainJobs noop jobs submitted while no
// worker runs, then worked off by freshly started workers.
type DrainResult struct {
	Jobs int64 `json:"jobs"`
	// SubmitSeconds and SubmitRate: the pre-submission through POST
	// /submit_jobs (SubmitClients clients, BatchSize jobs per request).
	SubmitSeconds float64 `json:"submit_seconds"`
	SubmitRate    float64 `json:"submit_rate"`
	// Seconds and Rate: from the workers' start (process launch) to the
	// last finished_at recorded in PostgreSQL.
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"rate"`
	// FirstFinishSeconds is the workers' start to the first finished_at;
	// SteadyRate is the jobs over the first to last finished_at.
	FirstFinishSeconds float64 `json:"first_finish_seconds"`
	SteadyRate         float64 `json:"steady_rate"`
	Completed          int64   `json:"completed"`
	// MeanClaimBatch and MeanResultBatch are the coordinator's mean claim
	// and result-apply batch sizes over the drain, from its /metrics.
	MeanClaimBatch  float64 `json:"mean_claim_batch"`
	MeanResultBatch float64 `json:"mean_result_batch"`
	// Submit is resource use during the pre-submission; Resources during
	// the drain, per 100,000 drained jobs.
	Submit    Usage `json:"submit_resources"`
	Resources Usage `json:"resources"`
}

func runDrain(ctx context.Context, c *cluster) (*DrainResult, error) {
	cfg := c.cfg
	c.stopWorkers() // pre-submission happens with no worker at all
	res := &DrainResult{Jobs: int64(cfg.DrainJobs)}

	s := c.newSampler()
	s.start()
	t0 := time.Now()
	n, _, err := submitN(ctx, c, cfg.DrainJobs, newBatches(newJobShape(cfg), cfg.BatchSize).body)
	res.SubmitSeconds = time.Since(t0).Seconds()
	res.Submit = s.stop(n)
	sortUse(&res.Submit)
	if err != nil {
		return res, err
	}
	res.SubmitRate = float64(n) / res.SubmitSeconds
	c.log.Info("drain: submitted", "jobs", n, "seconds", round(res.SubmitSeconds, 2), "jobs_per_s", round(res.SubmitRate, 0))
	if b, err := c.pg.backlog(ctx); err != nil {
		return res, err
	} else if b != n {
		return res, fmt.Errorf("backlog is %d after submitting %d jobs", b, n)
	}

	before, err := c.client.scrape(ctx, c.coordinator().URL)
	if err != nil {
		return res, err
	}
	s = c.newSampler()
	s.start()
	start := time.Now()
	if _, err := c.startWorkers(ctx, cfg.Workers, cfg.Concurrency, func(p *proc) { s.add(p.Name, p.Pid(), true) }); err != nil {
		s.stop(0)
		return res, err
	}
	err = waitBacklog(ctx, c, cfg.DrainTimeout, "drain")
	res.Resources = s.stop(n)
	sortUse(&res.Resources)
	if err != nil {
		return res, err
	}
	if after, err := c.client.scrape(ctx, c.coordinator().URL); err == nil {
		res.MeanClaimBatch, _ = mean(before, after, "dts_claim_batch_size")
		res.MeanResultBatch, _ = mean(before, after, "dts_result_batch_size")
	}
	sp, err := c.pg.completedSpan(ctx)
	if err != nil {
		return res, err
	}
	res.Completed = sp.completed
	if sp.completed != n {
		counts, _ := c.pg.statusCounts(ctx)
		return res, fmt.Errorf("%d of %d jobs completed (by status: %v)", sp.completed, n, counts)
	}
	res.Seconds = sp.lastFinished.Sub(start).Seconds()
	res.Rate = float64(n) / res.Seconds
	res.FirstFinishSeconds = sp.firstFinished.Sub(start).Seconds()
	if d := sp.lastFinished.Sub(sp.firstFinished).Seconds(); d > 0 {
		res.SteadyRate = float64(n) / d
	}
	c.log.Info("drain: done", "jobs", n, "seconds", round(res.Seconds, 2), "jobs_per_s", round(res.Rate, 0))
	return res, nil
}

// waitBacklog polls until no job is pending, retrying or leased, logging
// progress every 5 s.
func waitBacklog(ctx context.Context, c *cluster, timeout time.Duration, what string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	lastLog := time.Now()
	for {
		b, err := c.pg.backlog(ctx)
		if err != nil {
			return err
		}
		if b == 0 {
			return nil
		}
		if err := c.checkAlive(); err != nil {
			return err
		}
		if time.Since(lastLog) >= 5*time.Second {
			c.log.Info(what+": waiting", "backlog", b)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("%s: %d jobs still unfinished after %v", what, b, timeout)
			}
			return ctx.Err()
		case <-time.After(pollEvery(c.cfg.PollInterval, b)):
		}
	}
}

// pollEvery is the wait between two backlog counts: PollInterval, longer
// while the backlog is large (one more interval per 50,000 jobs, at most
// 5 s), because counting a large backlog costs PostgreSQL real CPU time.
// Nothing is timed by this poll but the end of a large backlog, and the
// backlog is small by then.
func pollEvery(interval time.Duration, backlog int64) time.Duration {
	return min(max(interval, time.Duration(backlog/50_000)*interval), max(interval, 5*time.Second))
}

// submitN submits n jobs through POST /submit_jobs, with SubmitClients
// clients posting BatchSize jobs each, body(k, size) being batch k's, and
// returns how many were accepted and the largest job id. It stops at the
// first error.
func submitN(ctx context.Context, c *cluster, n int, body func(k int64, size int) []byte) (int64, int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []byte)
	go func() {
		defer close(batches)
		for k, left := int64(0), n; left > 0; k, left = k+1, left-c.cfg.BatchSize {
			select {
			case batches <- body(k, min(left, c.cfg.BatchSize)):
			case <-ctx.Done():
				return
			}
		}
	}()
	var accepted atomic.Int64
	var mu sync.Mutex
	var lastID int64
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for range c.cfg.SubmitClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for body := range batches {
				ids, err := c.client.submitBatch(ctx, body)
				if err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
				accepted.Add(int64(len(ids)))
				if len(ids) > 0 {
					mu.Lock()
					lastID = max(lastID, slices.Max(ids))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return accepted.Load(), lastID, firstErr
	}
	return accepted.Load(), lastID, ctx.Err()
}

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}
