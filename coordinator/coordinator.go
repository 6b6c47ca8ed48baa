// Package coordinator is the scheduler's brain. One coordinator leads at a
// time, holding a lease in PostgreSQL with a time limit (store.LeaderAcquire);
// others stand by and take the lease when the leader stops renewing it
// (leader.go). Every write a leader makes carries its epoch, so a deposed
// leader that wakes up changes nothing. The leader's work is five services
// (service.go lists them):
//
//   - tracks workers by their heartbeats (timed by their arrival in Redis),
//   - leases due jobs in batches to the least-recently-assigned workers with
//     free slots and delivers them through each worker's Redis list,
//   - applies results from the results stream, rejecting any whose fencing
//     token no longer matches, and acknowledges them only after commit,
//   - reclaims the leases of dead workers at once and of expired leases,
//   - schedules retries with backoff and moves exhausted jobs to the DLQ,
//   - mirrors the DLQ into Redis and deletes old finished jobs.
//
// PostgreSQL holds every fact; what the leader keeps in memory (the worker
// registry) is rebuilt from heartbeats and the leased rows when it starts.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dtsched/dts/coordinator/internal/registry"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// Coordinator is one coordinator process: leader or standby.
type Coordinator struct {
	cfg     Config
	log     *slog.Logger
	store   *store.Store
	queue   *queue.Queue
	reg     *prometheus.Registry
	metrics *metrics
	auth    *authState // worker credentials, tokens on /workers (auth.go)

	mu       sync.Mutex
	leading  *leaderState // nil while standing by
	epoch    atomic.Int64
	stopping atomic.Bool
}

// New connects to PostgreSQL (applying migrations) and Redis.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Coordinator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL, store.Options{MaxConns: 16, Migrate: true, PinIndexPlans: true})
	if err != nil {
		return nil, err
	}
	q, err := queue.OpenSentinel(ctx, cfg.RedisURL, cfg.RedisPrefix, queue.Sentinel{
		Addrs: cfg.RedisSentinelAddrs, Master: cfg.RedisSentinelMaster, Password: cfg.RedisSentinelPassword})
	if err != nil {
		st.Close()
		return nil, err
	}
	c := &Coordinator{cfg: cfg, log: log.With("component", "coordinator", "coordinator_id", cfg.ID),
		store: st, queue: q, reg: newRegistry()}
	c.metrics = newMetrics(c.reg)
	c.reg.MustRegister(newStateCollector(st, c.registry, c.metrics))
	if err := c.initAuth(); err != nil {
		_ = q.Close()
		st.Close()
		return nil, err
	}
	return c, nil
}

// registry returns the leader's worker registry, or nil while standing by.
func (c *Coordinator) registry() *registry.Registry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leading == nil {
		return nil
	}
	return c.leading.workers
}

// Handler serves /healthz, /readyz, /metrics and /workers (which needs the
// admin scope when tokens are configured). Every answer is written by
// httpx, errors included.
func (c *Coordinator) Handler() http.Handler {
	r := httpx.NewRouter(c.log, nil)
	r.Get("/healthz", httpx.HealthzWith(c.health))
	r.Get("/readyz", c.handleReadyz)
	r.With(c.requireAdmin).Get("/workers", httpx.Handler(c.handleWorkers))
	r.Handle("/metrics", httpx.MetricsHandler(c.reg, c.log))
	return r
}

// health is what /healthz says beside "status": "ok".
func (c *Coordinator) health() map[string]any {
	role := "standby"
	if c.registry() != nil {
		role = "leader"
	}
	return map[string]any{"role": role, "epoch": c.epoch.Load(), "coordinator_id": c.cfg.ID}
}

func (c *Coordinator) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{"postgres": "ok", "redis": "ok"}
	status := http.StatusOK
	if c.stopping.Load() {
		checks["process"], status = "shutting down", http.StatusServiceUnavailable
	}
	if err := c.store.Ping(ctx); err != nil {
		checks["postgres"], status = err.Error(), http.StatusServiceUnavailable
	}
	if err := c.queue.Ping(ctx); err != nil {
		checks["redis"], status = err.Error(), http.StatusServiceUnavailable
	}
	httpx.WriteJSON(w, status, map[string]any{"checks": checks})
}

func (c *Coordinator) handleWorkers(w http.ResponseWriter, _ *http.Request) error {
	reg := c.registry()
	if reg == nil {
		return httpx.Errorf(http.StatusServiceUnavailable, wire.CodeNotLeader, "this coordinator is standing by; ask the leader")
	}
	type out struct {
		ID          string    `json:"worker_id"`
		State       string    `json:"state"`
		JobTypes    []string  `json:"job_types"`
		Concurrency int       `json:"concurrency"`
		InFlight    int       `json:"in_flight"`
		LastSeen    time.Time `json:"last_heartbeat_at"`
		Protocol    int       `json:"protocol"`
		// ProtocolError says why a worker that speaks a protocol version
		// this coordinator does not serve gets no jobs.
		ProtocolError string `json:"protocol_error,omitempty"`
	}
	ws := []out{}
	for _, x := range reg.Snapshot() {
		protocol := x.Protocol
		if protocol == 0 { // known only from its leases: no heartbeat yet
			protocol = 1
		}
		ws = append(ws, out{x.ID, x.State(), x.Types, x.Concurrency, len(x.InFlight), x.LastSeen,
			protocol, protocolError(x.Protocol)})
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"workers": ws})
	return nil
}

// Run serves HTTP on ln and takes part in leader election until ctx is
// canceled; then it stops leading, shuts HTTP down and closes its pools.
func (c *Coordinator) Run(ctx context.Context, ln net.Listener) error {
	if err := c.checkListener(ln); err != nil {
		_ = c.queue.Close()
		c.store.Close()
		return err
	}
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second}
	httpErr := make(chan error, 1)
	go func() { httpErr <- srv.Serve(ln) }()
	c.log.InfoContext(ctx, "coordinator listening", "addr", ln.Addr().String())

	electCtx, stopElection := context.WithCancel(ctx)
	defer stopElection()
	electErr := make(chan error, 1)
	go func() { electErr <- c.elect(electCtx) }()

	var err error
	select {
	case <-ctx.Done():
	case err = <-httpErr:
		err = fmt.Errorf("http server: %w", err)
	}
	c.stopping.Store(true)
	stopElection()
	if e := <-electErr; e != nil && !errors.Is(e, context.Canceled) && err == nil {
		err = e
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ShutdownTimeout)
	defer cancel()
	if e := srv.Shutdown(shutCtx); e != nil && err == nil {
		err = fmt.Errorf("http shutdown: %w", e)
	}
	_ = c.queue.Close()
	c.store.Close()
	return err
}
