package bench

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dtsched/dts/internal/retry"
)

// SustainedResult is the sustained scenario: SubmitClients clients post
// noop batches (jobShape) while the workers run, each as soon as the previous one is
// answered and fewer than SustainedBacklog jobs are unfinished (or paced to
// SustainedRate); the window opens after a warm-up.
type SustainedResult struct {
	// OfferedRate is the configured cap, 0 for none.
	OfferedRate float64 `json:"offered_rate,omitempty"`
	// BacklogBound is the configured bound on unfinished jobs, 0 for none.
	BacklogBound  int     `json:"backlog_bound,omitempty"`
	WarmupSeconds float64 `json:"warmup_seconds"`
	Seconds       float64 `json:"seconds"`
	// Submitted and SubmitRate: jobs accepted inside the window.
	Submitted  int64   `json:"submitted"`
	SubmitRate float64 `json:"submit_rate"`
	// Completed and CompletedRate: jobs completed inside the window (the
	// difference of two counts in PostgreSQL). This is the maximum
	// sustained rate.
	Completed     int64   `json:"completed"`
	CompletedRate float64 `json:"completed_rate"`
	// BacklogStart and BacklogEnd: unfinished jobs (pending, retrying,
	// leased) when the window opened and when the load stopped.
	BacklogStart int64 `json:"backlog_start"`
	BacklogEnd   int64 `json:"backlog_end"`
	// BacklogClearSeconds is how long the workers then took to finish it,
	// and BacklogClearRate the resulting rate: a drain of a large backlog
	// in a table that holds every job of the run.
	BacklogClearSeconds float64 `json:"backlog_clear_seconds"`
	BacklogClearRate    float64 `json:"backlog_clear_rate"`
	SubmitErrors        int64   `json:"submit_errors"`
	// Refused counts batches the submitter refused 503 backlog_full
	// (only with -service-env MAX_BACKLOG=N); their clients retried after
	// 100 ms.
	Refused int64 `json:"refused_batches,omitempty"`
	// Resources is resource use during the window, BacklogResources while
	// the backlog cleared (per 100,000 jobs of each).
	Resources        Usage `json:"resources"`
	BacklogResources Usage `json:"backlog_resources"`
}

func runSustained(ctx context.Context, c *cluster) (*SustainedResult, error) {
	cfg := c.cfg
	if len(c.runningWorkers()) == 0 {
		if _, err := c.startWorkers(ctx, cfg.Workers, cfg.Concurrency, nil); err != nil {
			return nil, err
		}
	}
	res := &SustainedResult{WarmupSeconds: cfg.SustainedWarmup.Seconds(), OfferedRate: cfg.SustainedRate,
		BacklogBound: max(cfg.SustainedBacklog, 0)}
	bodies := newBatches(newJobShape(cfg), cfg.BatchSize)
	var batchSeq atomic.Int64
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var submitted, errs, refused, offered atomic.Int64
	var wg sync.WaitGroup
	// full tells whether the jobs submitted (and being submitted)
	// minus those completed reach the bound; always false without one.
	var sending atomic.Int64
	full := func() bool { return false }
	if res.BacklogBound > 0 {
		done, err := c.watchCompleted(loadCtx)
		if err != nil {
			return nil, err
		}
		full = func() bool {
			return submitted.Load()+sending.Load()-done.Load() >= int64(res.BacklogBound)
		}
	}
	loadStart := time.Now()
	for range cfg.SubmitClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for loadCtx.Err() == nil {
				if cfg.SustainedRate > 0 { // batch k is due at start + k·batch/rate
					k := offered.Add(int64(cfg.BatchSize)) - int64(cfg.BatchSize)
					_ = retry.Sleep(loadCtx, time.Until(loadStart.Add(time.Duration(float64(k)/cfg.SustainedRate*float64(time.Second)))))
				}
				for loadCtx.Err() == nil && full() {
					_ = retry.Sleep(loadCtx, 10*time.Millisecond)
				}
				sending.Add(int64(cfg.BatchSize))
				ids, err := c.client.submitBatch(loadCtx, bodies.body(batchSeq.Add(1)-1, cfg.BatchSize))
				sending.Add(-int64(cfg.BatchSize))
				if err != nil {
					if errors.Is(err, errBacklogFull) {
						refused.Add(1)
						_ = retry.Sleep(loadCtx, 100*time.Millisecond)
						continue
					}
					if loadCtx.Err() == nil {
						errs.Add(1)
						_ = retry.Sleep(loadCtx, 100*time.Millisecond)
					}
					continue
				}
				submitted.Add(int64(len(ids)))
			}
		}()
	}
	stop := func() { stopLoad(); wg.Wait() }

	_ = retry.Sleep(ctx, cfg.SustainedWarmup)
	s := c.newSampler()
	t0, s0 := time.Now(), submitted.Load()
	c0, err := c.pg.completed(ctx)
	if err != nil {
		stop()
		return nil, err
	}
	if res.BacklogStart, err = c.pg.backlog(ctx); err != nil {
		stop()
		return nil, err
	}
	s.start()
	prof := c.profile(ctx, "sustained", cfg.SustainedDuration-time.Since(t0))
	_ = retry.Sleep(ctx, cfg.SustainedDuration-time.Since(t0))
	t1, s1 := time.Now(), submitted.Load()
	c1, err := c.pg.completed(ctx)
	if err != nil {
		stop()
		s.stop(0)
		return nil, err
	}
	stop()
	res.Resources = s.stop(c1 - c0)
	if err := prof.wait(); err != nil {
		c.log.Warn("sustained: a profile failed", "error", err)
	}
	sortUse(&res.Resources)
	res.Seconds = t1.Sub(t0).Seconds()
	res.Submitted, res.Completed = s1-s0, c1-c0
	res.SubmitRate = float64(res.Submitted) / res.Seconds
	res.CompletedRate = float64(res.Completed) / res.Seconds
	res.SubmitErrors, res.Refused = errs.Load(), refused.Load()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if err := c.checkAlive(); err != nil {
		return res, err
	}
	if res.BacklogEnd, err = c.pg.backlog(ctx); err != nil {
		return res, err
	}
	c.log.Info("sustained: window done", "completed_per_s", round(res.CompletedRate, 0),
		"submitted_per_s", round(res.SubmitRate, 0), "backlog", res.BacklogEnd)
	s = c.newSampler()
	s.start()
	tb := time.Now()
	err = waitBacklog(ctx, c, cfg.BacklogTimeout, "sustained backlog")
	res.BacklogResources = s.stop(res.BacklogEnd)
	sortUse(&res.BacklogResources)
	if err != nil {
		return res, err
	}
	res.BacklogClearSeconds = time.Since(tb).Seconds()
	if res.BacklogEnd > 0 {
		res.BacklogClearRate = float64(res.BacklogEnd) / res.BacklogClearSeconds
	}
	return res, nil
}

// watchCompleted counts the attempts the running workers complete from now
// on, by reading their dts_worker_attempts_total every 100 ms until ctx
// ends. Workers count in memory; the coordinator's /metrics would run
// count queries in PostgreSQL, the database this scenario measures.
func (c *cluster) watchCompleted(ctx context.Context) (*atomic.Int64, error) {
	workers := c.runningWorkers()
	read := func() (float64, error) {
		total := 0.0
		for _, w := range workers {
			m, err := c.client.scrape(ctx, w.URL)
			if err != nil {
				return 0, err
			}
			for k, v := range m {
				if strings.HasPrefix(k, "dts_worker_attempts_total{") && strings.Contains(k, `outcome="completed"`) {
					total += v
				}
			}
		}
		return total, nil
	}
	base, err := read()
	if err != nil {
		return nil, err
	}
	var done atomic.Int64
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if n, err := read(); err == nil {
				done.Store(int64(n - base))
			}
		}
	}()
	return &done, nil
}
