package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/devcluster/process"
	"github.com/dtsched/dts/internal/netns"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/testwait"
)

// hostCluster is the cluster with every component on a host of its own: a
// network namespace with its own address, all on one bridge
// (internal/netns), so that a test can cut or degrade any one link between
// two components. The test process sits on the bridge's address (the
// gateway), which no fault touches: it submits, watches and checks from
// there.
//
// Two links always go through a toxiproxy, so that a test can slow, reset
// or black-hole them: each coordinator reaches PostgreSQL through a proxy
// of its own, and worker-a reaches Redis through one. Each toxiproxy runs
// on the server's host, so a partition of a link (which drops everything
// between the two hosts' addresses) cuts the proxied path too.
type hostCluster struct {
	*cluster
	net   *netns.Network
	hosts map[string]*netns.Host

	pg    *pgtest.Node
	pgURL string // PostgreSQL from the gateway, not proxied

	coords  []*proc
	workers map[string]*proc
	toxi    map[string]*toxiproxy // by host: hostPG, hostRedis
}

// The hosts of the topology.
const (
	hostPG        = "postgres"
	hostRedis     = "redis"
	hostSubmitter = "submitter"
	hostCoord1    = "coord-1"
	hostCoord2    = "coord-2"
	hostWorkerA   = "worker-a" // the built-in handlers; reaches Redis through a toxiproxy
	hostWorkerB   = "worker-b" // only zz_shout (a user's worker, the Go SDK)
	hostWorkerC   = "worker-c" // "*": any name (the Go SDK)
)

// customJobName is the name only worker-b (and worker-c's "*") handles. It
// sorts after every built-in name on purpose: dispatch must serve a group
// whatever its names.
const customJobName = "zz_shout"

// proxyName is the toxiproxy proxy of a host's link to a server.
func proxyName(host, server string) string { return host + "-" + server }

// Ports on each host's own address (every host has its own port space).
const (
	portService  = 8000
	portToxiAPI  = 8474
	portProxyPG1 = 15432 // coord-1's proxy to PostgreSQL
	portProxyPG2 = 15433 // coord-2's
	portProxyRed = 16379 // worker-a's proxy to Redis
)

// startHostCluster starts PostgreSQL, Redis, two toxiproxies, two
// coordinators (coord-1 leading), the submitter and three workers, each on
// its own host. It skips the test without root, ip or iptables.
func startHostCluster(t *testing.T) *hostCluster {
	t.Helper()
	n := netns.New(t) // its cleanup runs last: after every process is gone
	h := &hostCluster{net: n, hosts: map[string]*netns.Host{}, workers: map[string]*proc{}, toxi: map[string]*toxiproxy{}}
	for _, name := range []string{hostPG, hostRedis, hostSubmitter, hostCoord1, hostCoord2, hostWorkerA, hostWorkerB, hostWorkerC} {
		h.hosts[name] = n.AddHost(name)
	}
	pgHost, redisHost := h.hosts[hostPG], h.hosts[hostRedis]
	h.pg = pgtest.StartNode(t, pgtest.NodeOptions{Netns: pgHost.File(), Host: pgHost.IP, Trust: n.Subnet})
	h.pgURL = h.pg.URL(pgtest.PairDatabase)
	rd := redistest.StartIn(t, redisHost.File(), redisHost.IP)

	c := &cluster{t: t, logDir: t.TempDir(), dbURL: h.pgURL, redis: rd}
	c.base = append([]string{"DATABASE_URL=" + c.dbURL, "REDIS_URL=" + rd.URL(), "PATH=" + os.Getenv("PATH"),
		"INSECURE_NO_AUTH=true"}, fastEnv...)
	h.cluster = c
	t.Cleanup(c.stopAll) // before the servers' and the network's cleanup

	h.toxi[hostPG] = h.startToxiproxy(pgHost, []toxiProxySpec{
		{Name: proxyName(hostCoord1, hostPG), Listen: fmt.Sprintf("%s:%d", pgHost.IP, portProxyPG1), Upstream: fmt.Sprintf("%s:%d", pgHost.IP, h.pg.Port())},
		{Name: proxyName(hostCoord2, hostPG), Listen: fmt.Sprintf("%s:%d", pgHost.IP, portProxyPG2), Upstream: fmt.Sprintf("%s:%d", pgHost.IP, h.pg.Port())},
	})
	h.toxi[hostRedis] = h.startToxiproxy(redisHost, []toxiProxySpec{
		{Name: proxyName(hostWorkerA, hostRedis), Listen: fmt.Sprintf("%s:%d", redisHost.IP, portProxyRed), Upstream: rd.Addr()},
	})

	dbVia := func(port int, app string) string {
		return fmt.Sprintf("DATABASE_URL=postgres://postgres@%s:%d/%s?sslmode=disable&application_name=%s", pgHost.IP, port, pgtest.PairDatabase, app)
	}
	c1 := h.startOn(hostCoord1, "coordinator", "COORDINATOR_ADDR", "COORDINATOR_ID="+hostCoord1, dbVia(portProxyPG1, hostCoord1))
	c.eventually(30*time.Second, "coord-1 to lead", func() bool { return c.health(c1)["role"] == "leader" })
	c2 := h.startOn(hostCoord2, "coordinator", "COORDINATOR_ADDR", "COORDINATOR_ID="+hostCoord2, dbVia(portProxyPG2, hostCoord2))
	h.coords = []*proc{c1, c2}
	c.submitter = h.startOn(hostSubmitter, "submitter", "SUBMITTER_ADDR", dbVia(h.pg.Port(), hostSubmitter)).url
	h.workers[hostWorkerA] = h.startOn(hostWorkerA, "worker", "WORKER_ADDR", "WORKER_ID="+hostWorkerA,
		fmt.Sprintf("REDIS_URL=redis://%s:%d/0", redisHost.IP, portProxyRed))
	h.workers[hostWorkerB] = h.startOn(hostWorkerB, "sdkworker", "WORKER_ADDR", "WORKER_ID="+hostWorkerB, "SDK_JOB_NAMES="+customJobName)
	h.workers[hostWorkerC] = h.startOn(hostWorkerC, "sdkworker", "WORKER_ADDR", "WORKER_ID="+hostWorkerC, "SDK_JOB_NAMES=*")
	return h
}

// startOn starts a binary on the host named host, listening on the host's
// address, and waits for its /healthz.
func (h *hostCluster) startOn(host, bin, addrVar string, env ...string) *proc {
	h.t.Helper()
	hh := h.hosts[host]
	return h.startAt(hh.File(), fmt.Sprintf("%s:%d", hh.IP, portService), host, bin, addrVar, env...)
}

// leader is the coordinator that says it leads, and the other; ok is false
// unless exactly one does.
func (h *hostCluster) leader() (leader, standby *proc, ok bool) {
	var leaders []*proc
	var others []*proc
	for _, p := range h.coords {
		if h.role(p) == "leader" {
			leaders = append(leaders, p)
		} else {
			others = append(others, p)
		}
	}
	if len(leaders) != 1 {
		return nil, nil, false
	}
	return leaders[0], others[0], true
}

// steadyLeader is leader, looked at until it finds one for up to 30 s:
// one look may miss it while a loaded coordinator's /healthz takes longer
// than the look's timeout, or while a lease changes hands, even just after
// an earlier look found one.
func (h *hostCluster) steadyLeader() (leader, standby *proc, ok bool) {
	_ = testwait.Until(h.t, 30*time.Second, func() error {
		if leader, standby, ok = h.leader(); !ok {
			return errors.New("no single leader")
		}
		return nil
	})
	return leader, standby, ok
}

// role is what a coordinator's /healthz says it is, "" when it does not
// answer.
func (h *hostCluster) role(p *proc) string {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(p.url + "/healthz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var out struct {
		Role string `json:"role"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return out.Role
}

// db connects the test to PostgreSQL from the gateway.
func (h *hostCluster) db(ctx context.Context) *pgx.Conn {
	h.t.Helper()
	conn, err := pgx.Connect(ctx, h.pgURL)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// toxiproxy is a toxiproxy server on one host, driven through its HTTP
// API.
type toxiproxy struct {
	api string
}

type toxiProxySpec struct {
	Name     string `json:"name"`
	Listen   string `json:"listen"`
	Upstream string `json:"upstream"`
	Enabled  bool   `json:"enabled"`
}

var (
	toxiBuild    sync.Once
	toxiBuildErr error
)

// toxiproxyBin builds toxiproxy's server (a tool of this module, e2e/go.mod)
// into binDir once per test binary.
func toxiproxyBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "toxiproxy-server")
	toxiBuild.Do(func() {
		out, err := exec.Command("go", "build", "-o", bin, "github.com/Shopify/toxiproxy/v2/cmd/server").CombinedOutput()
		if err != nil {
			toxiBuildErr = fmt.Errorf("build toxiproxy: %w\n%s", err, out)
		}
	})
	if toxiBuildErr != nil {
		t.Fatal(toxiBuildErr)
	}
	return bin
}

// startToxiproxy runs a toxiproxy server on host with the given proxies,
// its API on the host's address, and waits until it lists them. The
// cluster stops it with the other processes.
func (h *hostCluster) startToxiproxy(host *netns.Host, proxies []toxiProxySpec) *toxiproxy {
	t := h.t
	t.Helper()
	for i := range proxies {
		proxies[i].Enabled = true
	}
	conf, err := json.Marshal(proxies)
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(h.logDir, "toxiproxy-"+host.Name+".json")
	if err := os.WriteFile(confPath, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	p := h.startProgram(process.Spec{Name: "toxiproxy-" + host.Name, Path: toxiproxyBin(t),
		Args: []string{"-host", host.IP, "-port", fmt.Sprint(portToxiAPI), "-config", confPath}, Netns: host.File()})
	x := &toxiproxy{api: fmt.Sprintf("http://%s:%d", host.IP, portToxiAPI)}
	h.eventually(20*time.Second, p.name+" to list its proxies", func() bool {
		select {
		case <-p.done:
			t.Fatalf("%s exited during start-up:\n%s", p.name, tailFile(p.log, 20))
		default:
		}
		resp, err := http.Get(x.api + "/proxies")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var got map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&got)
		return len(got) == len(proxies)
	})
	return x
}

// addToxic adds a toxic named name to proxy: typ is toxiproxy's type
// (latency, bandwidth, reset_peer, timeout...), stream "upstream" (client
// to server) or "downstream".
func (x *toxiproxy) addToxic(proxy, name, typ, stream string, attrs map[string]any) error {
	body, _ := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	resp, err := http.Post(x.api+"/proxies/"+proxy+"/toxics", "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("add toxic %s to %s: %w", name, proxy, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return fmt.Errorf("add toxic %s to %s: %s %s", name, proxy, resp.Status, b.String())
	}
	return nil
}

// removeToxic removes a toxic; a proxy's connections that a timeout toxic
// held are closed with it.
func (x *toxiproxy) removeToxic(proxy, name string) error {
	req, _ := http.NewRequest(http.MethodDelete, x.api+"/proxies/"+proxy+"/toxics/"+name, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("remove toxic %s of %s: %w", name, proxy, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("remove toxic %s of %s: %s", name, proxy, resp.Status)
	}
	return nil
}
