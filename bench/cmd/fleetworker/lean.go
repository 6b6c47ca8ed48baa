package main

// The lean fleet (FLEET_LEAN=1): FLEET_SIZE workers that speak the worker
// protocol under their own ids, heartbeats, prefetch and results, but
// share the process's Redis connections and complete every delivery at
// once, as a no-op handler would. A fleet of workers each with its own
// library, connections and blocking read costs the machine more than the
// leader it is there to measure (bench -workers-per-process); this one
// keeps the leader's side of the wire the same (one list and one
// in-flight set per worker, one result entry per worker and round, one
// heartbeat per worker and interval) and spends little on its own.
//
// Shards of leanShardSize workers each have a goroutine that sweeps its
// workers' lists in one pipelined round trip (LMPOP of the control list,
// then the job list, as every worker does), sends each worker's results
// as one batch entry, and blocks on all of the shard's lists when a sweep
// finds nothing. One goroutine heartbeats for everyone.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/prefetch"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/retry"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/worker"
)

// leanShardSize is how many workers one sweeping goroutine serves.
const leanShardSize = 100

type leanWorker struct {
	id        string
	jobTypes  []string
	jobs, ctl string

	// Owned by the shard's goroutine while it sweeps; read by heartbeats
	// under the shard's mutex.
	held     map[int64]int64 // job id → lease token, popped and not yet reported
	prefetch int             // what the last heartbeat said
	done     int64           // completions since the last regular heartbeat
	doneAt   time.Time       // when done was last reset
	beatAt   time.Time       // when the last regular heartbeat went out
	sampled  int64           // done at the last sample
	sampleAt time.Time       // when the last sample was taken
}

type leanShard struct {
	mu      sync.Mutex
	workers []*leanWorker
}

type leanFleet struct {
	rdb       *redis.Client
	keys      queue.Keys
	cfg       worker.Config
	shards    []*leanShard
	completed atomic.Int64
	log       *slog.Logger
	host      string
}

func runLean(ctx context.Context, ids []string, jobTypes [][]string, cfg worker.Config, addr string, log *slog.Logger) error {
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	shards := (len(ids) + leanShardSize - 1) / leanShardSize
	opt.PoolSize = 2*shards + 4
	f := &leanFleet{rdb: redis.NewClient(opt), keys: queue.Keys{Prefix: cfg.RedisPrefix}, cfg: cfg, log: log}
	defer f.rdb.Close()
	f.host, _ = os.Hostname()
	now := time.Now()
	for i, id := range ids {
		if i%leanShardSize == 0 {
			f.shards = append(f.shards, &leanShard{})
		}
		s := f.shards[len(f.shards)-1]
		s.workers = append(s.workers, &leanWorker{id: id, jobTypes: jobTypes[i], jobs: f.keys.WorkerJobs(id), ctl: f.keys.WorkerControl(id),
			held: map[int64]int64{}, prefetch: cfg.Prefetch, doneAt: now, sampleAt: now})
	}
	// Registered before anything is popped: the leader leases only to
	// workers it has heard from.
	if err := f.heartbeatAll(ctx, false, true); err != nil {
		return err
	}
	stopHTTP, err := serveHTTP(addr, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "dts_worker_attempts_total{outcome=%q} %d\n", "completed", f.completed.Load())
	})
	if err != nil {
		return err
	}
	defer stopHTTP()
	var wg sync.WaitGroup
	for _, s := range f.shards {
		wg.Go(func() { f.sweepLoop(ctx, s) })
	}
	wg.Go(func() { f.heartbeatLoop(ctx) })
	wg.Wait()
	// Say stopped. A delivery a sweep popped but could not report before
	// ctx ended is still held, so the last heartbeat names it and the
	// leader gives it back.
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return f.heartbeatAll(stopCtx, true, true)
}

// sweepLoop serves one shard until ctx ends.
func (f *leanFleet) sweepLoop(ctx context.Context, s *leanShard) {
	for ctx.Err() == nil {
		n, err := f.sweep(ctx, s)
		if err != nil {
			if ctx.Err() == nil {
				f.log.Error("sweep failed", "error", err)
				_ = retry.Sleep(ctx, 200*time.Millisecond)
			}
			continue
		}
		if n == 0 {
			f.block(ctx, s)
		}
	}
}

// sweep pops every worker's lists of the shard in one round trip, reports
// every delivery completed in another, and returns how many it popped.
func (f *leanFleet) sweep(ctx context.Context, s *leanShard) (int, error) {
	pipe := f.rdb.Pipeline()
	cmds := make([]*redis.KeyValuesCmd, len(s.workers))
	s.mu.Lock()
	for i, w := range s.workers {
		cmds[i] = pipe.LMPop(ctx, "right", f.room(w), w.ctl, w.jobs)
	}
	s.mu.Unlock()
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	byWorker := make([][]wire.Delivery, len(s.workers))
	popped := 0
	s.mu.Lock()
	for i, w := range s.workers {
		if key, vals, err := cmds[i].Result(); err == nil && key == w.jobs {
			byWorker[i] = f.take(w, vals)
			popped += len(byWorker[i])
		}
	}
	s.mu.Unlock()
	if popped == 0 {
		return 0, nil
	}
	return popped, f.report(ctx, s, byWorker)
}

// room is how many deliveries w may take: the coordinator never leases it
// more than its slots and prefetch.
func (f *leanFleet) room(w *leanWorker) int64 {
	return int64(max(f.cfg.Concurrency+w.prefetch-len(w.held), 1))
}

// take decodes w's popped deliveries and holds them until reported.
// Undecodable ones are dropped, as a worker drops them (no token to
// answer for). A cancel needs nothing: every job ends in its sweep.
func (f *leanFleet) take(w *leanWorker, vals []string) []wire.Delivery {
	ds := make([]wire.Delivery, 0, len(vals))
	for _, v := range vals {
		d, err := queue.DecodeDelivery([]byte(v))
		if err != nil {
			continue
		}
		w.held[d.JobID] = d.LeaseToken
		ds = append(ds, d)
	}
	return ds
}

// report sends each worker's completions as one result batch entry, as a
// worker's send loop does with the results it has ready. Batches with
// logs (wire.CodecLogs): the fleet runs against a leader of its own build.
func (f *leanFleet) report(ctx context.Context, s *leanShard, byWorker [][]wire.Delivery) error {
	now := time.Now()
	pipe := f.rdb.Pipeline()
	for i, ds := range byWorker {
		if len(ds) == 0 {
			continue
		}
		rs := make([]wire.Result, len(ds))
		for j, d := range ds {
			rs[j] = wire.Result{JobID: d.JobID, LeaseToken: d.LeaseToken, WorkerID: s.workers[i].id, Attempt: d.Attempt,
				Outcome: wire.OutcomeCompleted, StartedAt: now, FinishedAt: now}
		}
		for len(rs) > 0 {
			n := min(len(rs), 256)
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: f.keys.Results(), Values: []any{"b", wire.AppendResultBatchWithLogs(nil, rs[:n])}})
			rs = rs[n:]
		}
	}
	for {
		_, err := pipe.Exec(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return err
		}
		f.log.Error("send results failed; retrying", "error", err)
		_ = retry.Sleep(ctx, 100*time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	total := 0
	for i, ds := range byWorker {
		w := s.workers[i]
		for _, d := range ds {
			delete(w.held, d.JobID)
		}
		w.done += int64(len(ds))
		total += len(ds)
	}
	f.completed.Add(int64(total))
	return nil
}

// block waits up to a second for any list of the shard to get an entry,
// and handles what it popped as a sweep does.
func (f *leanFleet) block(ctx context.Context, s *leanShard) {
	keys := make([]string, 0, 2*len(s.workers))
	for _, w := range s.workers {
		keys = append(keys, w.ctl, w.jobs)
	}
	key, vals, err := f.rdb.BLMPop(ctx, time.Second, "right", int64(f.cfg.Concurrency+f.cfg.Prefetch), keys...).Result()
	if err != nil || len(vals) == 0 {
		return
	}
	byWorker := make([][]wire.Delivery, len(s.workers))
	s.mu.Lock()
	for i, w := range s.workers {
		if key == w.jobs {
			byWorker[i] = f.take(w, vals)
		}
	}
	s.mu.Unlock()
	if err := f.report(ctx, s, byWorker); err != nil && ctx.Err() == nil {
		f.log.Error("report", "error", err)
	}
}

// heartbeatLoop sends each worker's heartbeat every interval, and at once
// for a worker whose completions of the last sample ask for at least
// twice the prefetch it last said, or for PrefetchMax (as an adaptive
// worker does).
func (f *leanFleet) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(prefetch.Sample)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := f.heartbeatAll(ctx, false, false); err != nil && ctx.Err() == nil {
			f.log.Error("heartbeats failed", "error", err)
		}
	}
}

// heartbeatAll sends the heartbeats that are due (all of them with all).
func (f *leanFleet) heartbeatAll(ctx context.Context, stopped, all bool) error {
	now := time.Now()
	bounds := prefetch.Bounds{Min: f.cfg.Prefetch, Max: f.cfg.PrefetchMax}
	pipe := f.rdb.Pipeline()
	n := 0
	for _, s := range f.shards {
		s.mu.Lock()
		for _, w := range s.workers {
			regular := now.Sub(w.beatAt) >= f.cfg.HeartbeatInterval
			var sample int
			early := false
			if now.Sub(w.sampleAt) >= prefetch.Sample {
				sample, early = bounds.Early(w.prefetch, w.done-w.sampled, now.Sub(w.sampleAt))
				w.sampled, w.sampleAt = w.done, now
			}
			if !all && !regular && !early {
				continue
			}
			if regular || all {
				w.prefetch = bounds.Adapt(w.done, now.Sub(w.doneAt))
				w.done, w.doneAt, w.beatAt, w.sampled, w.sampleAt = 0, now, now, 0, now
			} else {
				w.prefetch = sample // grows early; the counts run on to the regular beat
			}
			inFlight := make([]wire.InFlight, 0, len(w.held))
			for job, token := range w.held {
				inFlight = append(inFlight, wire.InFlight{JobID: job, LeaseToken: token, Waiting: true})
			}
			hb := wire.Heartbeat{WorkerID: w.id, JobTypes: w.jobTypes, Concurrency: f.cfg.Concurrency, Prefetch: w.prefetch,
				InFlight: inFlight, Stopped: stopped, Codec: wire.CodecTrace, Protocol: wire.ProtocolVersion, SentAt: now,
				Host: f.host, Version: "fleetworker-lean"}
			b, err := json.Marshal(&hb)
			if err != nil {
				s.mu.Unlock()
				return err
			}
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: f.keys.Heartbeats(), MaxLen: 10000, Approx: true, Values: []any{"h", b}})
			n++
		}
		s.mu.Unlock()
	}
	if n == 0 {
		return nil
	}
	_, err := pipe.Exec(ctx)
	return err
}

// leanJobTypes is what each worker announces: the one name FLEET_JOB_NAMES
// gives it, or the built-in handlers' names.
func leanJobTypes(size int, names []string, builtins handlers) [][]string {
	all := make([]string, 0, len(builtins))
	for name := range builtins {
		all = append(all, name)
	}
	out := make([][]string, size)
	for i := range out {
		if names == nil {
			out[i] = all
		} else {
			out[i] = []string{strings.TrimSpace(names[i%len(names)])}
		}
	}
	return out
}
