package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/devcluster/process"
	"github.com/dtsched/dts/internal/queue"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// This file is the worker-protocol conformance suite (docs/conformance.md):
// it runs one SDK's conformance worker as a black box against a real
// PostgreSQL, Redis, submitter and coordinator and checks, from the
// outside (the HTTP API, the job timeline, Redis), that it keeps the
// protocol's rules. Each check is a function that returns an error naming
// the rule broken, so that TestConformanceCatchesBrokenWorker can assert
// that a broken worker fails them; runConformance runs each as a subtest.

// conformanceSDK says how to start one SDK's conformance worker.
type conformanceSDK struct {
	Name    string   // "go", "python", "typescript"
	Command []string // argv; relative paths are relative to the repo root
	Env     []string // extra environment, NAME=VALUE (added to the contract's variables)
}

// The variables `make conformance CMD=... CMD_ENV=...` sets: a command
// line to run the suite against and extra NAME=VALUE settings for it, each
// split on spaces.
const (
	conformanceCmdEnv   = "DTS_CONFORMANCE_CMD"
	conformanceExtraEnv = "DTS_CONFORMANCE_ENV"
)

// goConformanceSDK is the Go SDK's conformance worker, built by TestMain.
func goConformanceSDK() conformanceSDK {
	return conformanceSDK{Name: "go", Command: []string{filepath.Join(binDir, "conformanceworker")}}
}

// TestConformanceGo runs the suite against the Go SDK's conformance
// worker, or, when DTS_CONFORMANCE_CMD is set (`make conformance
// CMD='python3 my_worker.py'`), against that command instead.
func TestConformanceGo(t *testing.T) {
	t.Parallel()
	sdk := goConformanceSDK()
	if line := os.Getenv(conformanceCmdEnv); line != "" {
		sdk = conformanceSDK{Name: "command", Command: strings.Fields(line), Env: strings.Fields(os.Getenv(conformanceExtraEnv))}
	}
	runConformance(t, sdk)
}

// confCheck is one check of the suite.
type confCheck struct {
	name string
	run  func(t *testing.T, e *confEnv) error
}

// Settings of the workers the suite starts.
const (
	confHeartbeat   = 200 * time.Millisecond // the cluster's HEARTBEAT_INTERVAL (fastEnv)
	confGrace       = 500 * time.Millisecond // SHUTDOWN_GRACE of the worker that is drained
	confConcurrency = 8                      // WORKER_CONCURRENCY of the shared worker
)

// confJobTypes are the job names every conformance worker handles.
var confJobTypes = []string{"conf.echo", "conf.fail", "conf.large", "conf.log", "conf.permanent", "conf.progress", "conf.sleep", "conf.stubborn", "conf.text"}

// runConformance runs every check against sdk's conformance worker. The
// checks that can share a worker run in parallel on one cluster (with
// worker credentials required); those that need a worker to themselves
// (a cancel before its delivery, SIGTERM draining, duplicate deliveries, a
// Redis restart) run one after another on a second cluster.
func runConformance(t *testing.T, sdk conformanceSDK) {
	t.Run("shared", func(t *testing.T) {
		t.Parallel()
		e := startConfShared(t, sdk)
		together(t, confSharedChecks, 4, func(ch confCheck) string { return ch.name }, func(t *testing.T, ch confCheck) {
			if err := ch.run(t, e); err != nil {
				t.Error(err)
			}
		})
	})
	t.Run("isolated", func(t *testing.T) {
		t.Parallel()
		e := startConfIsolated(t, sdk)
		for _, ch := range confIsolatedChecks {
			t.Run(ch.name, func(t *testing.T) {
				if err := ch.run(t, e); err != nil {
					t.Error(err)
				}
			})
		}
	})
}

// confEnv is one cluster the checks run against.
type confEnv struct {
	sdk         conformanceSDK
	c           *cluster
	coordinator *proc
	rdb         *redis.Client
	keys        queue.Keys
	worker      string // the id of the worker the checks submit to
	credentials map[string]string

	// State the isolated checks hand on, in order.
	drained []string // jobs the drained worker handed back
	iso     *proc    // the worker the later checks run on
}

// startConfShared starts the shared cluster: coordinator and submitter,
// worker credentials required, and the SDK's worker with concurrency 8.
func startConfShared(t *testing.T, sdk conformanceSDK) *confEnv {
	e := newConfEnv(t, sdk, "REQUIRE_WORKER_CREDENTIALS=true")
	for _, id := range []string{"conf-main", "conf-rival"} {
		e.credentials[id] = e.c.cli("coordinator", "worker-credential", "create", "-worker-id", id)
	}
	e.coordinator = e.c.startCoordinator("c1")
	e.c.startSubmitter()
	e.worker = "conf-main"
	e.startWorker(t, e.worker, "WORKER_CONCURRENCY="+fmt.Sprint(confConcurrency), "WORKER_CREDENTIAL="+e.credentials[e.worker])
	if err := e.waitRegistered(t, e.worker, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return e
}

// startConfIsolated starts the cluster whose worker is started by the
// checks themselves.
func startConfIsolated(t *testing.T, sdk conformanceSDK) *confEnv {
	e := newConfEnv(t, sdk)
	e.coordinator = e.c.startCoordinator("c1")
	e.c.startSubmitter()
	return e
}

func newConfEnv(t *testing.T, sdk conformanceSDK, env ...string) *confEnv {
	c := newCluster(t, env...)
	rdb := redis.NewClient(&redis.Options{Addr: c.redis.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return &confEnv{sdk: sdk, c: c, rdb: rdb, credentials: map[string]string{}}
}

// startWorker starts the SDK's conformance worker as id with the
// contract's environment plus env; it does not wait for it to join.
func (e *confEnv) startWorker(t *testing.T, id string, env ...string) *proc {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	name := e.sdk.Name + "-" + id
	env = append(append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"WORKER_ID=" + id, "REDIS_URL=" + e.c.redis.URL(), "REDIS_PREFIX=",
		"HEARTBEAT_INTERVAL=" + confHeartbeat.String(), "WORKER_CONCURRENCY=4", "SHUTDOWN_GRACE=5s"}, e.sdk.Env...), env...)
	p, err := e.c.group.Start(process.Spec{Name: name, Path: e.sdk.Command[0], Args: e.sdk.Command[1:],
		Dir: root, // a relative path in Command is the repo root's
		Env: env, Log: filepath.Join(e.c.logDir, name+".log")})
	if err != nil {
		t.Fatalf("start the %s conformance worker %v: %v", e.sdk.Name, e.sdk.Command, err)
	}
	return newProc(p)
}

// confWorker is one worker as the coordinator's GET /workers shows it.
type confWorker struct {
	ID          string   `json:"worker_id"`
	State       string   `json:"state"`
	JobTypes    []string `json:"job_types"`
	Concurrency int      `json:"concurrency"`
	InFlight    int      `json:"in_flight"`
}

func (e *confEnv) workers(ctx context.Context) (map[string]confWorker, error) {
	var out struct {
		Workers []confWorker `json:"workers"`
	}
	if err := getJSON(ctx, e.coordinator.url+"/workers", &out); err != nil {
		return nil, err
	}
	m := map[string]confWorker{}
	for _, w := range out.Workers {
		m[w.ID] = w
	}
	return m, nil
}

// waitRegistered waits until the coordinator lists id as a live worker.
func (e *confEnv) waitRegistered(t *testing.T, id string, within time.Duration) error {
	err := testwait.Until(t, within, func() error {
		ws, err := e.workers(t.Context())
		if err != nil {
			return err
		}
		if w, ok := ws[id]; !ok || w.State == "unavailable" {
			return fmt.Errorf("the coordinator does not list %s as a live worker (GET /workers: %v)", id, ws)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("joining by heartbeat: worker %s did not join within %v: %w", id, within, err)
	}
	return nil
}

// lastHeartbeat returns the newest heartbeat of worker id on the stream.
func (e *confEnv) lastHeartbeat(ctx context.Context, id string) (wire.Heartbeat, error) {
	hbs, err := e.heartbeats(ctx, id)
	if err != nil {
		return wire.Heartbeat{}, err
	}
	if len(hbs) == 0 {
		return wire.Heartbeat{}, fmt.Errorf("no heartbeat of %s on %s", id, e.keys.Heartbeats())
	}
	return hbs[len(hbs)-1], nil
}

// heartbeats returns worker id's heartbeats still on the stream, oldest
// first.
func (e *confEnv) heartbeats(ctx context.Context, id string) ([]wire.Heartbeat, error) {
	msgs, err := e.rdb.XRange(ctx, e.keys.Heartbeats(), "-", "+").Result()
	if err != nil {
		return nil, err
	}
	var out []wire.Heartbeat
	for _, m := range msgs {
		s, _ := m.Values["h"].(string)
		var hb wire.Heartbeat
		if err := json.Unmarshal([]byte(s), &hb); err != nil {
			return nil, fmt.Errorf("heartbeat %s is not JSON: %w: %q", m.ID, err, s)
		}
		if hb.WorkerID == id {
			out = append(out, hb)
		}
	}
	return out, nil
}

// checkJoin: the worker shows in GET /workers with the contract's job
// types and concurrency, and its heartbeats are JSON with the fields the
// protocol asks for.
func checkJoin(t *testing.T, e *confEnv) error {
	ws, err := e.workers(t.Context())
	if err != nil {
		return err
	}
	w := ws[e.worker]
	types := slices.Sorted(slices.Values(w.JobTypes))
	if !slices.Equal(types, confJobTypes) {
		return fmt.Errorf("heartbeat job_types: the worker announces %v, want exactly %v", types, confJobTypes)
	}
	if w.Concurrency != confConcurrency {
		return fmt.Errorf("heartbeat concurrency: the worker announces %d, want WORKER_CONCURRENCY=%d", w.Concurrency, confConcurrency)
	}
	hb, err := e.lastHeartbeat(t.Context(), e.worker)
	if err != nil {
		return fmt.Errorf("heartbeat stream: %w", err)
	}
	if hb.SentAt.IsZero() {
		return fmt.Errorf("heartbeat fields: sent_at is required, got %+v", hb)
	}
	t.Logf("%s worker announces codec %d (0: JSON)", e.sdk.Name, hb.Codec)
	return nil
}
