package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/worker"
)

// runNaive is CONFORMANCE_BREAK=rerun: a worker loop written without the
// SDK that breaks the lease rules on purpose. It runs every delivery it
// pops, a copy of one it has run included, and ignores the control list,
// so that the suite's self-test can see the checks for duplicate and stale
// deliveries and for a cancel sent before its delivery fail. It does not
// drain on SIGTERM.
func runNaive(ctx context.Context, cfg worker.Config, handlers map[string]worker.HandlerFunc, log *slog.Logger) error {
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	keys := queue.Keys{Prefix: cfg.RedisPrefix}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = worker.DefaultHeartbeatInterval
	}
	var mu sync.Mutex
	running := map[int64]int64{} // lease token → job id
	types := make([]string, 0, len(handlers))
	for name := range handlers {
		types = append(types, name)
	}
	heartbeat := func() {
		mu.Lock()
		hb := wire.Heartbeat{WorkerID: cfg.ID, JobTypes: types, Concurrency: cfg.Concurrency, InFlight: []wire.InFlight{},
			Credential: cfg.Credential, SentAt: time.Now()}
		for token, id := range running {
			hb.InFlight = append(hb.InFlight, wire.InFlight{JobID: id, LeaseToken: token, Started: true})
		}
		mu.Unlock()
		b, _ := json.Marshal(hb)
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Heartbeats(), Values: []any{"h", string(b)}}).Err(); err != nil && ctx.Err() == nil {
			log.Error("heartbeat", "error", err)
		}
	}
	go func() {
		t := time.NewTicker(cfg.HeartbeatInterval)
		defer t.Stop()
		for {
			heartbeat()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	for ctx.Err() == nil {
		vals, err := rdb.BRPop(ctx, time.Second, keys.WorkerJobs(cfg.ID)).Result()
		if errors.Is(err, redis.Nil) || ctx.Err() != nil {
			continue
		}
		if err != nil {
			log.Error("receive", "error", err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		var d wire.Delivery
		if err := json.Unmarshal([]byte(vals[1]), &d); err != nil {
			log.Error("bad delivery", "error", err)
			continue
		}
		h := handlers[d.Name]
		if h == nil {
			continue
		}
		mu.Lock()
		running[d.LeaseToken] = d.JobID
		mu.Unlock()
		go func() {
			r := wire.Result{JobID: d.JobID, LeaseToken: d.LeaseToken, WorkerID: cfg.ID, Attempt: d.Attempt, StartedAt: time.Now()}
			res, err := h(ctx, &worker.Job{ID: strconv.FormatInt(d.JobID, 10), Name: d.Name, Payload: d.Payload,
				Attempt: d.Attempt, MaxRetries: d.MaxRetries, WorkerID: cfg.ID})
			r.FinishedAt, r.Outcome = time.Now(), wire.OutcomeCompleted
			if err != nil {
				r.Outcome, r.Reason, r.Error = wire.OutcomeFailed, "error", err.Error()
			} else {
				r.Result, _ = json.Marshal(res)
			}
			b, _ := json.Marshal(r)
			if err := rdb.XAdd(context.WithoutCancel(ctx), &redis.XAddArgs{Stream: keys.Results(), Values: []any{"r", string(b)}}).Err(); err != nil {
				log.Error("result", "error", err)
			}
			mu.Lock()
			delete(running, d.LeaseToken)
			mu.Unlock()
		}()
	}
	os.Exit(1) // no drain: a broken worker
	return nil
}
