// Package redistest gives tests a real Redis, started from the system
// redis-server binary.
//
// Three kinds of server, because tests need different isolation:
//
//   - One shared server per test binary, started on first use of URL or
//     Prefix. Tests share it and stay apart by key prefix: each test asks
//     Prefix(t) for a unique prefix ("t1:", "t2:", …) and builds every key
//     under it, so tests can call t.Parallel. Nobody may FLUSHDB, FLUSHALL,
//     SHUTDOWN, CONFIG SET or otherwise change this server as a whole.
//   - A dedicated server per test, from Start(t), for tests that flush,
//     reconfigure or restart Redis (Restart kills it with SIGKILL and starts
//     an empty one on the same port, the way a crashed Redis without
//     persistence comes back). It is stopped when the test ends.
//   - A Redis Sentinel group per test, from StartSentinels(t): a master, a
//     replica and three sentinels, for tests of a failover
//     (StartSentinelsIn: each on a network namespace's host of its own).
//
// Every server listens on a free 127.0.0.1 port (StartIn: an address of a
// network namespace the test made) with persistence off
// (--save "" --appendonly no) and its files in a temporary directory.
//
// Usage, in a package whose tests need only Redis:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// A test binary has only one TestMain, so a package that needs both Redis and
// PostgreSQL calls the two Cleanup functions itself:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		pgtest.Cleanup()
//		redistest.Cleanup()
//		os.Exit(code)
//	}
//
// What must stay true: no redis-server outlives its test binary. Cleanup and
// t.Cleanup stop them; if the binary dies first (panic, -timeout, kill -9)
// the kernel kills them (Pdeathsig), and the next test binary removes the
// directories left behind. Only _test.go files import this package.
//
// While a server runs, one goroutine per server,
// github.com/dtsched/dts/internal/childproc.(*Process).supervise, waits for
// it (goleak: ignore it with IgnoreAnyFunction); after Cleanup and the
// tests' t.Cleanup, none is left.
//
// The binary is $REDIS_SERVER if set, else redis-server from $PATH,
// /usr/bin or /usr/sbin.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dtsched/dts/internal/childproc"
)

const (
	dirPrefix    = "dts-redistest-"
	ownerFile    = "owner.pid"
	startTimeout = 30 * time.Second
)

var (
	sharedMu  sync.Mutex // guards shared, sharedErr, cleaned
	shared    *Server
	sharedErr error
	cleaned   bool

	prefixSeq atomic.Int64
)

// Main is a TestMain for packages that need only Redis: it runs the tests,
// stops the shared server if one was started, and exits with the tests'
// status; if they passed but left a goroutine running (goleak, ignoring
// what opts name), it prints it and exits 1. The check comes after Cleanup,
// so the server's supervising goroutine needs no ignore.
func Main(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	Cleanup()
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests passed: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Cleanup stops the shared server, if it was started, and removes its
// directory. It is idempotent; after it, URL panics and Prefix fails the test.
func Cleanup() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	cleaned = true
	if shared != nil {
		shared.Stop()
		shared = nil
	}
}

// URL returns the shared server's URL, redis://127.0.0.1:PORT/0, starting
// the server on first use. It panics if the server cannot start; call
// Prefix(t) first to fail the test cleanly instead.
func URL() string {
	s, err := sharedServer()
	if err != nil {
		panic("redistest: " + err.Error())
	}
	return s.URL()
}

// Prefix returns a key prefix ("t<n>:") no other test in this binary gets.
// Build every key of the test under it; it is what keeps tests on the shared
// server apart. It starts the shared server on first use and fails the test
// if it cannot.
func Prefix(t testing.TB) string {
	t.Helper()
	if _, err := sharedServer(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return fmt.Sprintf("t%d:", prefixSeq.Add(1))
}

func sharedServer() (*Server, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if cleaned {
		return nil, errors.New("shared server already stopped by Cleanup")
	}
	if shared == nil && sharedErr == nil {
		shared, sharedErr = newServer()
	}
	return shared, sharedErr
}

// Server is a redis-server process owned by one test (or, for the shared
// server, by the test binary). Its methods are safe for concurrent use.
type Server struct {
	mu   sync.Mutex
	bin  string
	dir  string // "" once stopped
	port int
	proc *childproc.Process // nil while not running

	// Set before the first launch, never changed after.
	password string   // AUTH before the readiness PING; "" for none
	args     []string // more settings after the common ones
	sentinel string   // when set: run as a sentinel with this configuration file
	host     string   // the address it binds and is reached at; "" for 127.0.0.1
	netns    string   // the network namespace file to run it in; "" for this process's
}

// Start starts a dedicated, empty server for this test and stops it when the
// test ends. Use it for tests that flush, reconfigure or restart Redis.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := newServer()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartIn is Start with the server in the network namespace whose file is
// netns (/var/run/netns/NAME, as netns.Host.File gives it), listening on
// host, an address of that namespace.
func StartIn(t testing.TB, netns, host string) *Server {
	t.Helper()
	s, err := launchNew(&Server{host: host, netns: netns})
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// URL is redis://127.0.0.1:PORT/0 (or the host StartIn gave). It stays the same across Restart.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Addr is 127.0.0.1:PORT (or the host StartIn gave). It stays the same
// across Restart.
func (s *Server) Addr() string { return net.JoinHostPort(s.bindHost(), strconv.Itoa(s.port)) }

func (s *Server) bindHost() string {
	if s.host == "" {
		return "127.0.0.1"
	}
	return s.host
}

// Restart kills the server with SIGKILL and starts a new, empty one on the
// same port, returning once it answers PING. Clients see their connections
// drop and then reconnect to a Redis that has lost every key. After Stop,
// Restart starts the server again.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
	if s.dir == "" {
		dir, err := makeDir()
		if err != nil {
			t.Fatalf("redistest: restart: %v", err)
		}
		s.dir = dir
	} else {
		// Nothing is persisted, but make "data gone" hold regardless.
		for _, name := range []string{"dump.rdb", "appendonly.aof", "appendonlydir"} {
			_ = os.RemoveAll(filepath.Join(s.dir, name))
		}
	}
	// The port was ours a moment ago; retry briefly in case the kernel
	// has not let go of it yet.
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if err = s.launch(); err == nil || !errors.Is(err, errPortTaken) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("redistest: restart on port %d: %v", s.port, err)
	}
}

// Stop kills the server (SIGKILL: nothing needs saving) and removes its
// directory. It is idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
		s.dir = ""
	}
}

func newServer() (*Server, error) { return launchNew(&Server{}) }

// launchNew starts s, whose settings are filled in, in a new directory on
// a free port.
func launchNew(s *Server) (*Server, error) {
	bin, err := serverBin()
	if err != nil {
		return nil, err
	}
	removeStale(os.TempDir())
	dir, err := makeDir()
	if err != nil {
		return nil, err
	}
	s.bin, s.dir = bin, dir
	// A free port may be taken before redis binds it (other test binaries
	// do the same); then try another.
	for attempt := 1; ; attempt++ {
		port, err := childproc.FreePort()
		if err == nil {
			s.port = port // s is not shared yet; port never changes after this
			err = s.launch()
		}
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			s.Stop()
			return nil, err
		}
	}
}

func makeDir() (string, error) {
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return "", fmt.Errorf("make temp dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("write owner file: %w", err)
	}
	return dir, nil
}

var errPortTaken = errors.New("port taken")

// launch starts redis-server on s.port and waits until it answers PING.
// Callers hold s.mu (or own s exclusively).
func (s *Server) launch() error {
	port := s.port
	logPath := filepath.Join(s.dir, "redis.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer logFile.Close()
	var args []string
	if s.sentinel != "" {
		// A sentinel rewrites its configuration file: it must be its own.
		conf := filepath.Join(s.dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(s.sentinel), 0o644); err != nil {
			return fmt.Errorf("write sentinel config: %w", err)
		}
		args = []string{conf, "--sentinel"}
	} else {
		args = []string{"--save", "", "--appendonly", "no"}
	}
	args = append(args,
		"--port", strconv.Itoa(port),
		"--bind", s.bindHost(),
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "",
		"--loglevel", "warning",
	)
	if s.host != "" {
		// Off the loopback, a server without a password refuses every
		// client unless protected mode is off; its network is the test's.
		args = append(args, "--protected-mode", "no")
	}
	cmd := exec.Command(s.bin, append(args, s.args...)...)
	cmd.Dir = s.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	proc, err := childproc.StartInNetns(cmd, s.netns)
	if err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	s.proc = proc

	addr := s.Addr()
	deadline := time.Now().Add(startTimeout)
	for {
		err := ping(addr, s.password)
		if err == nil {
			return nil
		}
		select {
		case <-proc.Exited():
			s.proc = nil
			log := tail(logPath)
			if strings.Contains(log, "Address already in use") {
				return fmt.Errorf("%w: %d", errPortTaken, port)
			}
			return fmt.Errorf("redis-server exited during start-up: %s\n%s", cmd.ProcessState, log)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server not ready after %s: %v\n%s", startTimeout, err, tail(logPath))
		}
	}
}

// kill stops the process, if running, with SIGKILL and reaps it.
func (s *Server) kill() {
	if s.proc == nil {
		return
	}
	_ = s.proc.Cmd.Process.Kill()
	<-s.proc.Exited()
	s.proc = nil
}

// ping sends PING in the Redis protocol, after AUTH when password is set,
// and expects +PONG.
func ping(addr, password string) error {
	line, err := command(addr, password, "PING")
	if err != nil {
		return err
	}
	if line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// command sends one command (after AUTH when password is set) on a new
// connection and returns its reply: the line of a simple reply, or the
// contents of a bulk string. A Redis error is an error.
func command(addr, password string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReader(conn)
	send := func(args ...string) (string, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write([]byte(b.String())); err != nil {
			return "", err
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "-"):
			return "", fmt.Errorf("%s: %s", args[0], line[1:])
		case strings.HasPrefix(line, "$"):
			n, err := strconv.Atoi(line[1:])
			if err != nil || n < 0 {
				return "", fmt.Errorf("%s answered %q", args[0], line)
			}
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return "", err
			}
			return string(buf[:n]), nil
		}
		return line, nil
	}
	if password != "" {
		if _, err := send("AUTH", password); err != nil {
			return "", err
		}
	}
	return send(args...)
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

func serverBin() (string, error) {
	if bin := os.Getenv("REDIS_SERVER"); bin != "" {
		return bin, nil
	}
	if bin, err := exec.LookPath("redis-server"); err == nil {
		return bin, nil
	}
	for _, bin := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"} {
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
		}
	}
	return "", errors.New("redis-server not found: install it (Debian: apt-get install -y redis-server) or set REDIS_SERVER")
}

// removeStale deletes directories left by test binaries that died without
// cleaning up (their redis-server died with them through Pdeathsig).
func removeStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being created right now, or not ours
		}
		if owner, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && !childproc.Alive(owner) {
			_ = os.RemoveAll(dir)
		}
	}
}
