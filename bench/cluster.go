package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dtsched/dts/devcluster/process"
)

// startTimeout bounds each service's start-up (migrations included).
const startTimeout = 60 * time.Second

// cluster is the bench's own submitter, coordinator and workers, on a
// database and a Redis key prefix no one else uses.
type cluster struct {
	cfg Config
	log *slog.Logger

	dir      string // logs (and binaries when built here)
	procs    process.Group
	dbURL    string
	dbName   string // set when the bench created the database
	pg       *pg
	client   *client
	baseEnv  []string
	services []*proc // submitter, coordinator
	redisPID int     // the Redis server's pid when it runs here, else 0
	link     *link   // the proxies of a LinkLatency or LinkProxy run, else nil

	mu      sync.Mutex
	workers []*proc
	seq     int
	// jobNames is, with JobGroups, the job name each worker handles, by
	// worker id.
	jobNames map[string]string
}

// startCluster prepares the database and binaries and starts the submitter
// and the coordinator (no worker). On error it cleans up what it made.
func startCluster(ctx context.Context, cfg Config, log *slog.Logger) (_ *cluster, err error) {
	c := &cluster{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.dir, err = os.MkdirTemp("", "dts-bench-"); err != nil {
		return nil, fmt.Errorf("make work dir: %w", err)
	}
	c.procs.LogDir, c.procs.BinDir = c.dir, cfg.BinDir
	if c.procs.BinDir == "" {
		c.procs.BinDir = filepath.Join(c.dir, "bin")
		log.Info("building submitter, coordinator and worker", "dir", c.procs.BinDir)
		if err := buildBinaries(ctx, c.procs.BinDir); err != nil {
			return nil, err
		}
	}
	c.dbURL = cfg.DatabaseURL
	if !cfg.ExistingDatabase {
		name := databaseName(time.Now())
		if c.dbURL, err = createDatabase(ctx, cfg.DatabaseURL, name); err != nil {
			return nil, err
		}
		c.dbName = name
		log.Info("created database", "database", name)
	}
	if c.pg, err = openPG(ctx, c.dbURL); err != nil {
		return nil, err
	}
	// The services and workers reach the stores at these; the bench's own
	// reads use c.pg and cfg.RedisURL, direct.
	svcDB, svcRedis := c.dbURL, cfg.RedisURL
	if cfg.LinkLatency > 0 || cfg.LinkProxy {
		if c.link, err = startLink(ctx, c, c.dbURL, cfg.RedisURL); err != nil {
			return nil, err
		}
		svcDB, svcRedis = c.link.dbURL, c.link.redisURL
		log.Info("services reach PostgreSQL and Redis through toxiproxy", "latency_each_way", cfg.LinkLatency)
	}
	c.baseEnv = []string{"REDIS_URL=" + svcRedis, "REDIS_PREFIX=" + cfg.RedisPrefix, "LOG_LEVEL=" + cfg.LogLevel}
	submitterDB := withParams(svcDB, cfg.SubmitterDBParams)
	// The bench measures the scheduler, not the API's per-client rate
	// limit, which would cap one client (the bench) at its default.
	subEnv := []string{"DATABASE_URL=" + submitterDB, "RATE_LIMIT_RPS=-1"}
	if cfg.PayloadBytes > defaultMaxPayload {
		subEnv = append(subEnv, submitterPayloadEnv(cfg.PayloadBytes))
	}
	sub, err := c.start("submitter", "submitter", "SUBMITTER_ADDR", subEnv...)
	if err != nil {
		return nil, err
	}
	if err := sub.waitHealthy(ctx, nil); err != nil {
		return nil, err
	}
	coord, err := c.start("coordinator", "coordinator", "COORDINATOR_ADDR", "DATABASE_URL="+svcDB, "COORDINATOR_ID=bench-coordinator")
	if err != nil {
		return nil, err
	}
	isLeader := func(b []byte) bool {
		var h struct {
			Role string `json:"role"`
		}
		return json.Unmarshal(b, &h) == nil && h.Role == "leader"
	}
	if err := coord.waitHealthy(ctx, isLeader); err != nil {
		return nil, err
	}
	c.services = []*proc{sub, coord}
	c.client = newClient(sub.URL, max(cfg.LatencyConns, 4*cfg.SubmitClients))
	// The jobs table must start empty: every scenario counts jobs.
	if n, err := c.pg.statusCounts(ctx); err != nil {
		return nil, err
	} else if len(n) > 0 {
		return nil, fmt.Errorf("database %s already holds jobs (%v): the bench needs an empty one", redactURL(c.dbURL), n)
	}
	return c, nil
}

func (c *cluster) coordinator() *proc { return c.services[1] }

// start launches one service binary on a free port, with nothing of our
// environment but PATH and HOME, in its own process group (a ^C at the
// terminal reaches only the bench, which then kills it).
func (c *cluster) start(name, bin, addrVar string, env ...string) (*proc, error) {
	env = append(append(append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")},
		c.baseEnv...), env...), c.cfg.ServiceEnv...)
	var pprofAddr string
	if c.cfg.ProfileDir != "" {
		var err error
		if pprofAddr, err = process.FreeAddr(); err != nil {
			return nil, err
		}
		env = append(env, "PPROF_ADDR="+pprofAddr)
	}
	p, err := c.procs.Start(process.Spec{Name: name, Path: bin, Env: env, AddrVar: addrVar, OwnGroup: true})
	if err != nil {
		return nil, err
	}
	return &proc{Process: p, pprofAddr: pprofAddr}, nil
}

// startWorkers launches n workers with concurrency slots each, all at once,
// and returns once every one is healthy and the coordinator has registered
// it. onStart, if set, sees each process right after it was started.
//
// With WorkersPerProcess above 1 the n workers run that many to a
// fleetworker process (the last process may hold fewer). With JobGroups
// they always do (FLEET_JOB_NAMES gives each its name): worker k of the n
// is in group k mod JobGroups and handles only that group's job name.
func (c *cluster) startWorkers(ctx context.Context, n, concurrency int, onStart func(*proc)) ([]*proc, error) {
	per := max(c.cfg.WorkersPerProcess, 1)
	names := groupNames(c.cfg.JobGroups)
	ps := make([]*proc, (n+per-1)/per)
	for i := range ps {
		c.mu.Lock()
		c.seq++
		name := fmt.Sprintf("worker-%d", c.seq)
		c.mu.Unlock()
		env := []string{"WORKER_ID=" + name, "WORKER_CONCURRENCY=" + strconv.Itoa(concurrency)}
		bin, ids := "worker", []string{name}
		if per > 1 || c.cfg.JobGroups > 0 || c.cfg.LeanFleet {
			size := min(per, n-i*per)
			bin, ids = "fleetworker", nil
			var handles []string
			for j := range size {
				ids = append(ids, fmt.Sprintf("%s-%d", name, j))
				handles = append(handles, names[(i*per+j)%len(names)])
			}
			env = append(env, "FLEET_SIZE="+strconv.Itoa(size))
			if c.cfg.LeanFleet {
				env = append(env, "FLEET_LEAN=1")
			}
			if c.cfg.JobGroups > 0 {
				env = append(env, "FLEET_JOB_NAMES="+strings.Join(handles, ","))
				c.mu.Lock()
				if c.jobNames == nil {
					c.jobNames = map[string]string{}
				}
				for j, id := range ids {
					c.jobNames[id] = handles[j]
				}
				c.mu.Unlock()
			}
		}
		p, err := c.start(name, bin, "WORKER_ADDR", env...)
		if err != nil {
			return nil, err
		}
		p.workerIDs = ids
		if onStart != nil {
			onStart(p)
		}
		ps[i] = p
	}
	c.mu.Lock()
	c.workers = append(c.workers, ps...)
	c.mu.Unlock()
	for _, p := range ps {
		if err := p.waitHealthy(ctx, nil); err != nil {
			return nil, err
		}
	}
	return ps, c.waitRegistered(ctx, ps)
}

// waitRegistered waits until the coordinator lists every one of ps as a
// worker that can take jobs.
func (c *cluster) waitRegistered(ctx context.Context, ps []*proc) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		known, err := c.registeredWorkers(ctx)
		if err == nil {
			all := true
			for _, p := range ps {
				for _, id := range p.workerIDs {
					all = all && known[id]
				}
			}
			if all {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("workers not registered with the coordinator after %v (last error: %v)", startTimeout, err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (c *cluster) registeredWorkers(ctx context.Context) (map[string]bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.coordinator().URL+"/workers", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Workers []struct {
			ID    string `json:"worker_id"`
			State string `json:"state"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("GET /workers: %w", err)
	}
	known := map[string]bool{}
	for _, w := range out.Workers {
		if w.State == "available" || w.State == "busy" {
			known[w.ID] = true
		}
	}
	return known, nil
}

// runningWorkers lists the workers still running.
func (c *cluster) runningWorkers() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*proc
	for _, p := range c.workers {
		if p.Running() {
			out = append(out, p)
		}
	}
	return out
}

// stopWorkers stops every running worker cleanly (SIGTERM: it hands back
// what it holds and says so), killing any that takes longer than 15 s.
func (c *cluster) stopWorkers() {
	var wg sync.WaitGroup
	for _, p := range c.runningWorkers() {
		wg.Go(func() { p.Stop(15 * time.Second) })
	}
	wg.Wait()
}

// close kills every process, drops the database the bench created and
// removes the bench's Redis keys and work directory (unless Keep).
func (c *cluster) close() {
	c.procs.Kill()
	if c.link != nil {
		c.link.close()
	}
	if c.client != nil {
		c.client.close()
	}
	if c.pg != nil {
		c.pg.close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if c.cfg.Keep {
		c.log.Info("kept database and logs", "database_url", redactURL(c.dbURL), "logs", c.dir)
	} else {
		if c.dbName != "" {
			if err := dropDatabase(ctx, c.cfg.DatabaseURL, c.dbName); err != nil {
				c.log.Warn("could not drop the bench database", "err", err)
			}
		}
		if c.dir != "" {
			_ = os.RemoveAll(c.dir)
		}
	}
	if rc, err := dialRedis(ctx, c.cfg.RedisURL); err == nil {
		if n, err := rc.deletePrefix(c.cfg.RedisPrefix); err != nil {
			c.log.Warn("could not delete the bench's Redis keys", "prefix", c.cfg.RedisPrefix, "err", err)
		} else {
			c.log.Debug("deleted Redis keys", "prefix", c.cfg.RedisPrefix, "keys", n)
		}
		rc.close()
	}
}

// logTails returns the end of each process's log, for error reports.
func (c *cluster) logTails(lines int) string { return c.procs.Tails(lines) }

// errStopped reports a process that died during a scenario.
var errStopped = errors.New("a service process exited")

// checkAlive fails if the submitter or coordinator has exited.
func (c *cluster) checkAlive() error {
	for _, p := range c.services {
		if !p.Running() {
			return fmt.Errorf("%w: %s (%s)\n%s", errStopped, p.Name, p.Cmd.ProcessState, p.Tail(20))
		}
	}
	return nil
}

// newSampler tracks the services, the running workers, the PostgreSQL
// processes serving the bench (when the server runs here), Redis (idem) and
// the bench itself, from now on.
func (c *cluster) newSampler() *sampler {
	s := newSampler(c.cfg.SampleInterval)
	for _, p := range c.services {
		s.add(p.Name, p.Pid(), false)
	}
	for _, p := range c.runningWorkers() {
		s.add(p.Name, p.Pid(), false)
	}
	s.addGroup("postgres", func() []int {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		pids, err := c.pg.backendPIDs(ctx)
		if err != nil {
			return nil
		}
		return slices.DeleteFunc(pids, func(pid int) bool { return !isProcess(pid, "postgres") })
	})
	if c.redisPID > 0 {
		s.add("redis", c.redisPID, false)
	}
	if c.link != nil && c.link.proc.Running() {
		s.add("toxiproxy", c.link.proc.Pid(), false)
	}
	s.add("bench", os.Getpid(), false)
	return s
}

// submitterPayloadEnv raises the submitter's MAX_PAYLOAD_BYTES to a
// PayloadBytes above its default.
func submitterPayloadEnv(payloadBytes int) string {
	return "MAX_PAYLOAD_BYTES=" + strconv.Itoa(payloadBytes)
}

// withParams appends query parameters to a URL.
func withParams(rawURL, params string) string {
	if params == "" {
		return rawURL
	}
	if strings.Contains(rawURL, "?") {
		return rawURL + "&" + params
	}
	return rawURL + "?" + params
}
