package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/dtsched/dts/internal/retry"
)

// RecoveryResult is the recovery scenario: two workers hold sleep jobs, one
// of them is killed with SIGKILL, and its jobs are followed until another
// worker has leased them again. The services run with their default
// heartbeat (1 s, dead after 3 misses) and lease (10 s) settings, so a
// re-lease well under 10 s comes from heartbeat loss, not lease expiry.
type RecoveryResult struct {
	Workers      int     `json:"workers"`
	Concurrency  int     `json:"concurrency"`
	Jobs         int     `json:"jobs"`
	SleepSeconds float64 `json:"sleep_seconds"`
	KilledWorker string  `json:"killed_worker"`
	// JobsOnKilled is how many jobs the killed worker held; Recovered how
	// many of them were leased again by another worker.
	JobsOnKilled int `json:"jobs_on_killed"`
	Recovered    int `json:"recovered"`
	// Relet is, per job of the killed worker, the time from the kill to
	// the new lease's started_at.
	Relet Percentiles `json:"kill_to_relet"`
	// Reasons counts the recorded reason of the killed attempts
	// (worker_failure: heartbeats stopped; lease_timeout: lease expired).
	Reasons map[string]int `json:"reasons"`
	// AttemptsKilled and AttemptsAll are attempt-count histograms, once
	// every job finished, of the killed worker's jobs and of all jobs. Each
	// killed attempt had started, so those jobs ran (at least partly) twice.
	AttemptsKilled map[int]int    `json:"attempts_killed"`
	AttemptsAll    map[int]int    `json:"attempts_all"`
	FinalStatus    map[string]int `json:"final_status"`
	// FinishedSeconds is the kill to the last job's finish.
	FinishedSeconds float64 `json:"finished_seconds"`
}

func runRecovery(ctx context.Context, c *cluster) (*RecoveryResult, error) {
	cfg := c.cfg
	c.stopWorkers()
	ws, err := c.startWorkers(ctx, 2, cfg.RecoveryConcurrency, nil)
	if err != nil {
		return nil, err
	}
	res := &RecoveryResult{Workers: 2, Concurrency: cfg.RecoveryConcurrency, Jobs: cfg.RecoveryConcurrency,
		SleepSeconds: cfg.RecoverySleep.Seconds()}
	job := fmt.Sprintf(`{"name":"sleep","payload":{"seconds":%g}}`, cfg.RecoverySleep.Seconds())
	var ids []int64
	for left := res.Jobs; left > 0; left -= cfg.BatchSize {
		got, err := c.client.submitBatch(ctx, batchBody(job, min(left, cfg.BatchSize)))
		if err != nil {
			return res, err
		}
		ids = append(ids, got...)
	}

	// Wait until every job is leased and running.
	var states []jobState
	deadline := time.Now().Add(30 * time.Second)
	for {
		if states, err = c.pg.jobStates(ctx, ids); err != nil {
			return res, err
		}
		leased := 0
		for _, s := range states {
			switch s.status {
			case "leased":
				leased++
			case "completed", "failed", "retrying":
				return res, fmt.Errorf("job %d is %s before the kill: raise -recovery-sleep", s.id, s.status)
			}
		}
		if leased == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("only %d of %d sleep jobs leased after 30 s", leased, len(ids))
		}
		_ = retry.Sleep(ctx, 20*time.Millisecond)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
	byWorker := map[string][]int64{}
	for _, s := range states {
		byWorker[s.workerID] = append(byWorker[s.workerID], s.id)
	}
	var victim *proc
	for _, w := range ws {
		if victim == nil || len(byWorker[w.Name]) > len(byWorker[victim.Name]) {
			victim = w
		}
	}
	victimIDs := byWorker[victim.Name]
	res.KilledWorker, res.JobsOnKilled = victim.Name, len(victimIDs)
	c.log.Info("recovery: killing worker", "worker_id", victim.Name, "jobs", len(victimIDs), "by_worker", counts(byWorker))
	killedAt := time.Now()
	_ = victim.Kill()

	// Follow the victim's jobs until each is leased by someone else.
	relet := map[int64]float64{}
	res.Reasons = map[string]int{}
	deadline = time.Now().Add(60 * time.Second)
	for len(relet) < len(victimIDs) {
		if states, err = c.pg.jobStates(ctx, victimIDs); err != nil {
			return res, err
		}
		now := time.Now()
		for _, s := range states {
			if _, done := relet[s.id]; done || s.attempts < 2 || s.workerID == victim.Name ||
				(s.status != "leased" && s.status != "completed") {
				continue
			}
			at := s.startedAt
			if at.Before(killedAt) || at.After(now) {
				at = now // clocks disagree: fall back to when we saw it
			}
			relet[s.id] = at.Sub(killedAt).Seconds()
			res.Reasons[s.lastReason]++
		}
		if time.Now().After(deadline) {
			break
		}
		_ = retry.Sleep(ctx, 20*time.Millisecond)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
	res.Recovered = len(relet)
	res.Relet = percentiles(slices.Collect(maps.Values(relet)))
	if res.Recovered < res.JobsOnKilled {
		return res, fmt.Errorf("%d of %d jobs of the killed worker not leased again within 60 s", res.JobsOnKilled-res.Recovered, res.JobsOnKilled)
	}
	c.log.Info("recovery: all jobs leased again", "max_seconds", round(res.Relet.Max/1000, 3))

	if err := waitFinished(ctx, c, ids, cfg.RecoverySleep+60*time.Second); err != nil {
		return res, err
	}
	res.FinishedSeconds = time.Since(killedAt).Seconds()
	if states, err = c.pg.jobStates(ctx, ids); err != nil {
		return res, err
	}
	isVictim := map[int64]bool{}
	for _, id := range victimIDs {
		isVictim[id] = true
	}
	var all, killed []int
	res.FinalStatus = map[string]int{}
	for _, s := range states {
		all = append(all, s.attempts)
		if isVictim[s.id] {
			killed = append(killed, s.attempts)
		}
		res.FinalStatus[s.status]++
	}
	res.AttemptsAll, res.AttemptsKilled = histogram(all), histogram(killed)
	return res, nil
}

func counts(m map[string][]int64) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}
