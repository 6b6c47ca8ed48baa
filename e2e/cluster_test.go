package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dtsched/dts/devcluster/process"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/testwait"
)

// binDir holds the three binaries, sdkworker (a user's worker written
// with the Go library) and conformanceworker (the Go SDK's conformance
// worker), built once per test binary.
var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	setDefaultParallel(2 * runtime.GOMAXPROCS(0))
	code := func() int {
		dir, err := os.MkdirTemp("", "dts-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binDir = dir
		var pkgs []string
		for _, pkg := range []string{"submitter/cmd/submitter", "coordinator/cmd/coordinator", "worker/cmd/worker", "e2e/cmd/sdkworker", "e2e/cmd/conformanceworker"} {
			pkgs = append(pkgs, "github.com/dtsched/dts/"+pkg)
		}
		if err := process.Build(context.Background(), dir, []string{"-race", "-ldflags=-w"}, pkgs...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	pgtest.Cleanup()
	redistest.Cleanup()
	if code == 0 {
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests passed: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// setDefaultParallel makes n tests run at once unless -parallel was given.
// These tests mostly wait on the processes they start (jobs that sleep,
// leases and heartbeats running out, a leader frozen for seconds), and
// little of that time is CPU: go test's default of GOMAXPROCS tests at once
// leaves the cores idle for much of the run. Twice that keeps them busy;
// more starts so many race-built clusters at once that their timers fire
// late.
func setDefaultParallel(n int) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(err)
		}
	}
}

// cluster is one test's set of processes sharing a database and a Redis,
// started by the harness's process mode (devcluster/process).
type cluster struct {
	t         *testing.T
	logDir    string // registered before stopAll, so logs outlive it
	dbURL     string
	redis     *redistest.Server
	base      []string // environment every process gets
	submitter string   // base URL
	group     process.Group
}

// proc is a harness process under the names the tests here use.
type proc struct {
	p    *process.Process
	name string
	cmd  *exec.Cmd
	url  string
	log  string
	done <-chan struct{} // closed once it has exited and been reaped
}

func newProc(p *process.Process) *proc {
	return &proc{p: p, name: p.Name, cmd: p.Cmd, url: p.URL, log: p.Log, done: p.Exited()}
}

// fast settings: heartbeats every 200ms, dead after 3 misses, short backoff.
var fastEnv = []string{
	"HEARTBEAT_INTERVAL=200ms", "HEARTBEAT_MISSES=3", "LEASE_DURATION=30s",
	"BACKOFF_BASE=50ms", "BACKOFF_CAP=200ms", "POLL_INTERVAL=100ms", "ELECTION_INTERVAL=250ms",
	"CPU_WORK=20ms", "FALLBACK_MAX=200ms", "LOG_LEVEL=debug",
}

func newCluster(t *testing.T, extraEnv ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, logDir: t.TempDir(), dbURL: pgtest.NewDatabase(t), redis: redistest.Start(t)}
	c.base = append([]string{"DATABASE_URL=" + c.dbURL, "REDIS_URL=" + c.redis.URL(), "PATH=" + os.Getenv("PATH")}, fastEnv...)
	c.base = append(c.base, extraEnv...)
	t.Cleanup(c.stopAll)
	return c
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := process.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// start runs a binary with the cluster's environment plus env, and waits
// for its /healthz.
func (c *cluster) start(name, bin, addrVar string, env ...string) *proc {
	c.t.Helper()
	return c.startAt("", "", name, bin, addrVar, env...)
}

// startAt is start with the process in the network namespace whose file is
// netns ("" for this process's, e.g. a netns.Host's File) listening on
// addr ("" for a free loopback port); later entries of env override the
// cluster's.
func (c *cluster) startAt(netns, addr, name, bin, addrVar string, env ...string) *proc {
	c.t.Helper()
	p := c.startProgram(process.Spec{Name: name, Path: filepath.Join(binDir, bin), Netns: netns, Addr: addr, AddrVar: addrVar,
		Env: append(append([]string{}, c.base...), env...)})
	process.MustBeHealthy(c.t, p.p, 30*time.Second)
	return p
}

// startProgram starts s, logging to the cluster's log directory unless s
// says where, without waiting for it. It is killed with the cluster.
func (c *cluster) startProgram(s process.Spec) *proc {
	c.t.Helper()
	if s.Log == "" {
		s.Log = filepath.Join(c.logDir, s.Name+".log")
	}
	return newProc(process.MustStart(c.t, &c.group, s))
}

func (c *cluster) startSubmitter() *proc {
	p := c.start("submitter", "submitter", "SUBMITTER_ADDR")
	c.submitter = p.url
	return p
}

func (c *cluster) startCoordinator(id string) *proc {
	return c.start(id, "coordinator", "COORDINATOR_ADDR", "COORDINATOR_ID="+id)
}

func (c *cluster) startWorker(id string, env ...string) *proc {
	return c.start(id, "worker", "WORKER_ADDR", append([]string{"WORKER_ID=" + id}, env...)...)
}

func (c *cluster) stopAll() {
	c.group.Kill()
	if c.t.Failed() {
		for _, p := range c.group.Processes() {
			c.t.Logf("---- %s log (tail) ----\n%s", p.Name, p.Tail(60))
		}
	}
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.p.Kill(); err != nil {
		t.Fatal(err)
	}
}

func (p *proc) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := p.p.Signal(s); err != nil {
		t.Fatal(err)
	}
}

func tailFile(path string, n int) string { return process.TailFile(path, n) }

// eventually is testwait.For on the cluster's test.
func (c *cluster) eventually(timeout time.Duration, what string, cond func() bool) {
	c.t.Helper()
	testwait.For(c.t, timeout, what, cond)
}

// do sends a JSON request and decodes the JSON answer.
func (c *cluster) do(method, url string, body any) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			c.t.Fatalf("%s %s: answer is not JSON: %q", method, url, b)
		}
	}
	return resp.StatusCode, out
}

func (c *cluster) submit(job map[string]any) string {
	c.t.Helper()
	code, out := c.do("POST", c.submitter+"/submit_job", job)
	if code != http.StatusCreated {
		c.t.Fatalf("submit %v: status %d %v", job, code, out)
	}
	id, _ := out["job_id"].(string)
	if id == "" {
		c.t.Fatalf("submit: no job_id in %v", out)
	}
	return id
}

func (c *cluster) job(id string) map[string]any {
	c.t.Helper()
	code, out := c.do("GET", c.submitter+"/jobs/"+id, nil)
	if code != http.StatusOK {
		c.t.Fatalf("get job %s: status %d %v", id, code, out)
	}
	return out
}

func (c *cluster) waitStatus(id, status string, timeout time.Duration) map[string]any {
	c.t.Helper()
	var j map[string]any
	c.eventually(timeout, "job "+id+" to be "+status, func() bool {
		j = c.job(id)
		return j["status"] == status
	})
	return j
}

// metric returns the sum of a metric's samples whose line contains match.
func (c *cluster) metric(url, name, match string) float64 {
	c.t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name) && (line[len(name)] == ' ' || line[len(name)] == '{') && strings.Contains(line, match) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

func (c *cluster) health(p *proc) map[string]any {
	c.t.Helper()
	_, out := c.do("GET", p.url+"/healthz", nil)
	return out
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
