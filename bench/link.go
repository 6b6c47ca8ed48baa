package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/devcluster/process"
)

// LinkResult is what the experiment's distance (Config.LinkLatency) put
// between the services and the stores, measured through the proxies.
type LinkResult struct {
	// LatencyMS is the latency toxic's delay, each way.
	LatencyMS float64 `json:"latency_ms"`
	// PostgresRoundTripMS and RedisRoundTripMS are the medians of a few
	// SELECT 1 and PING round trips through the proxies, before the
	// scenarios: about twice LatencyMS when the toxics work.
	PostgresRoundTripMS float64 `json:"postgres_round_trip_ms"`
	RedisRoundTripMS    float64 `json:"redis_round_trip_ms"`
	// Toxics are the toxics toxiproxy reports on its proxies before the
	// scenarios, each as "proxy/name: type stream attributes", sorted:
	// what the services' traffic really went through.
	Toxics []string `json:"toxics"`
}

// The toxiproxy proxies' names.
const (
	linkPostgres = "postgres"
	linkRedis    = "redis"
)

// toxiproxyBinName is the toxiproxy server's file name in a BinDir.
const toxiproxyBinName = "toxiproxy-server"

// link is the toxiproxy server of a run with LinkLatency: one proxy in
// front of PostgreSQL and one in front of Redis, each with a latency toxic
// on both directions, so that every round trip a service or a worker makes
// to a store pays the latency twice, as across hosts. The bench's own
// reads (counts, timestamps) and its Redis clean-up go direct.
type link struct {
	proc      *process.Process
	api       string // http://host:port of its HTTP API
	http      *http.Client
	dbURL     string // the bench database through the PostgreSQL proxy
	redisURL  string // Redis through its proxy
	latencyMS int64
}

type toxiProxy struct {
	Name     string `json:"name"`
	Listen   string `json:"listen"`
	Upstream string `json:"upstream"`
	Enabled  bool   `json:"enabled"`
}

// startLink starts a toxiproxy server in the cluster's process group (it
// dies with the bench) with proxies to the servers of dbURL and redisURL,
// adds the latency toxics, and returns the URLs through the proxies.
func startLink(ctx context.Context, c *cluster, dbURL, redisURL string) (_ *link, err error) {
	bin, err := toxiproxyBin(ctx, c)
	if err != nil {
		return nil, err
	}
	pgUp, err := upstreamAddr(dbURL, "5432")
	if err != nil {
		return nil, fmt.Errorf("link: database url: %w", err)
	}
	redisUp, err := upstreamAddr(redisURL, "6379")
	if err != nil {
		return nil, fmt.Errorf("link: redis url: %w", err)
	}
	var addrs [3]string // API, PostgreSQL proxy, Redis proxy
	for i := range addrs {
		if addrs[i], err = process.FreeAddr(); err != nil {
			return nil, err
		}
	}
	proxies := []toxiProxy{
		{Name: linkPostgres, Listen: addrs[1], Upstream: pgUp, Enabled: true},
		{Name: linkRedis, Listen: addrs[2], Upstream: redisUp, Enabled: true},
	}
	conf, err := json.Marshal(proxies)
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(c.dir, "toxiproxy.json")
	if err := os.WriteFile(confPath, conf, 0o644); err != nil {
		return nil, fmt.Errorf("link: %w", err)
	}
	host, port, _ := net.SplitHostPort(addrs[0])
	p, err := c.procs.Start(process.Spec{Name: "toxiproxy", Path: bin, OwnGroup: true,
		Args: []string{"-host", host, "-port", port, "-config", confPath},
		Env:  []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LOG_LEVEL=warn"}})
	if err != nil {
		return nil, err
	}
	l := &link{proc: p, api: "http://" + addrs[0], http: &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second},
		latencyMS: c.cfg.LinkLatency.Milliseconds()}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	if err := l.waitProxies(ctx, len(proxies)); err != nil {
		return nil, err
	}
	for _, px := range proxies {
		if l.latencyMS == 0 {
			break // LinkProxy: the proxies alone
		}
		for _, stream := range []string{"upstream", "downstream"} {
			if err := l.addLatency(ctx, px.Name, stream); err != nil {
				return nil, err
			}
		}
	}
	if l.dbURL, err = throughProxy(dbURL, addrs[1]); err != nil {
		return nil, err
	}
	if l.redisURL, err = throughProxy(redisURL, addrs[2]); err != nil {
		return nil, err
	}
	return l, nil
}

// toxiproxyBin is BinDir's toxiproxy-server, or one built (a tool of the
// bench module, bench/go.mod) into the run's directory.
func toxiproxyBin(ctx context.Context, c *cluster) (string, error) {
	if c.cfg.BinDir != "" {
		if bin := filepath.Join(c.cfg.BinDir, toxiproxyBinName); isFile(bin) {
			return bin, nil
		}
	}
	bin := filepath.Join(c.dir, "toxi", toxiproxyBinName)
	c.log.Info("building toxiproxy", "path", bin)
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/Shopify/toxiproxy/v2/cmd/server").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build toxiproxy (run the bench from the dts workspace, or put %s in -bin-dir): %w\n%s", toxiproxyBinName, err, out)
	}
	return bin, nil
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// close drops the idle connections to the API; the server dies with the
// cluster's other processes.
func (l *link) close() { l.http.CloseIdleConnections() }

// waitProxies waits up to startTimeout for the API to list n proxies.
func (l *link) waitProxies(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		var got map[string]any
		err := l.call(ctx, http.MethodGet, "/proxies", nil, &got)
		if err == nil && len(got) == n {
			return nil
		}
		select {
		case <-l.proc.Exited():
			return fmt.Errorf("toxiproxy exited during start-up:\n%s", l.proc.Tail(20))
		case <-ctx.Done():
			return fmt.Errorf("toxiproxy does not list its %d proxies after %v (last error: %v)", n, startTimeout, err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// addLatency delays every chunk of one direction of proxy ("upstream":
// client to server) by the link's latency.
func (l *link) addLatency(ctx context.Context, proxy, stream string) error {
	body := map[string]any{"name": "latency_" + stream, "type": "latency", "stream": stream, "toxicity": 1.0,
		"attributes": map[string]any{"latency": l.latencyMS, "jitter": 0}}
	if err := l.call(ctx, http.MethodPost, "/proxies/"+proxy+"/toxics", body, nil); err != nil {
		return fmt.Errorf("link: add the %s latency toxic to %s: %w", stream, proxy, err)
	}
	return nil
}

func (l *link) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, l.api+path, body)
	if err != nil {
		return err
	}
	resp, err := l.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// measure reads back the toxics toxiproxy applies and measures the link as
// a service sees it: the median of a few round trips to each server
// through its proxy.
func (l *link) measure(ctx context.Context) (LinkResult, error) {
	res := LinkResult{LatencyMS: float64(l.latencyMS)}
	var err error
	if res.Toxics, err = l.toxics(ctx); err != nil {
		return res, err
	}
	const n = 9
	conn, err := pgx.Connect(ctx, l.dbURL)
	if err != nil {
		return res, fmt.Errorf("link: connect to PostgreSQL through the proxy: %w", err)
	}
	defer conn.Close(context.Background())
	if res.PostgresRoundTripMS, err = medianMS(n, func() error {
		_, err := conn.Exec(ctx, "SELECT 1")
		return err
	}); err != nil {
		return res, fmt.Errorf("link: SELECT 1 through the proxy: %w", err)
	}
	rc, err := dialRedis(ctx, l.redisURL)
	if err != nil {
		return res, fmt.Errorf("link: %w", err)
	}
	defer rc.close()
	if res.RedisRoundTripMS, err = medianMS(n, func() error {
		_, err := rc.do("PING")
		return err
	}); err != nil {
		return res, fmt.Errorf("link: PING through the proxy: %w", err)
	}
	return res, nil
}

// toxics lists every proxy's toxics as toxiproxy's API reports them.
func (l *link) toxics(ctx context.Context) ([]string, error) {
	var proxies map[string]struct {
		Toxics []struct {
			Name       string         `json:"name"`
			Type       string         `json:"type"`
			Stream     string         `json:"stream"`
			Attributes map[string]any `json:"attributes"`
		} `json:"toxics"`
	}
	if err := l.call(ctx, http.MethodGet, "/proxies", nil, &proxies); err != nil {
		return nil, fmt.Errorf("link: list the proxies' toxics: %w", err)
	}
	var out []string
	for name, px := range proxies {
		for _, tx := range px.Toxics {
			attrs := make([]string, 0, len(tx.Attributes))
			for k, v := range tx.Attributes {
				attrs = append(attrs, fmt.Sprintf("%s=%v", k, v))
			}
			slices.Sort(attrs)
			out = append(out, fmt.Sprintf("%s/%s: %s %s %s", name, tx.Name, tx.Type, tx.Stream, strings.Join(attrs, " ")))
		}
	}
	slices.Sort(out)
	return out, nil
}

func medianMS(n int, f func() error) (float64, error) {
	ms := make([]float64, n)
	for i := range ms {
		t0 := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		ms[i] = float64(time.Since(t0).Microseconds()) / 1000
	}
	slices.Sort(ms)
	return ms[n/2], nil
}

// upstreamAddr is the host:port a URL points at, def the port when it has
// none.
func upstreamAddr(rawURL, def string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	if u.Hostname() == "" {
		return "", errors.New("no host in the url (a proxy needs a TCP address)")
	}
	if u.Query().Has("host") {
		return "", errors.New("the url names its host in a host parameter; give it in the url's authority")
	}
	port := u.Port()
	if port == "" {
		port = def
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// throughProxy is rawURL with its host:port replaced by addr's.
func throughProxy(rawURL, addr string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	u.Host = addr
	return u.String(), nil
}
