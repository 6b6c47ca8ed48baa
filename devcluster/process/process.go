// Package process starts dts binaries and the programs around them (an SDK's
// worker, toxiproxy, ...) as child processes, each with a log file, on
// loopback or in a network namespace, and stops, signals or kills them:
// the process mode of the cluster harness (see package devcluster).
//
// Why it is shaped this way: the end-to-end tests and the benchmark, a
// program, both use it, so nothing here takes a *testing.T; a test uses
// the small wrappers in testing.go. Every child is started through
// internal/childproc, so it dies with its parent and never outlives it.
// It imports none of the services: a program that only starts binaries
// does not compile them.
package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dtsched/dts/internal/childproc"
)

// Spec says how to start one program.
type Spec struct {
	// Name names the process in errors and, with a Group's LogDir, its log
	// file (NAME.log).
	Name string
	// Path is the program; a Group's BinDir is prepended to a relative one.
	Path string
	Args []string
	// Dir is the working directory; "" for this process's.
	Dir string
	// Env is the whole environment, nothing of this process's added; nil
	// inherits this process's (as exec.Cmd does).
	Env []string
	// Log is the file that receives stdout and stderr; "" for the Group's
	// LogDir/NAME.log.
	Log string
	// Netns is the network namespace file to start in (netns.Host.File);
	// "" for this process's.
	Netns string
	// Addr is the host:port it serves HTTP on, if any (Process.URL).
	Addr string
	// AddrVar, if set, is the environment variable that tells the program
	// where to listen (SUBMITTER_ADDR, WORKER_ADDR, ...): Start appends
	// AddrVar=Addr to Env, choosing a free 127.0.0.1 port when Addr is
	// empty.
	AddrVar string
	// OwnGroup puts it in a process group of its own, so that a ^C at the
	// terminal reaches only the parent, which then stops it.
	OwnGroup bool
}

// Group is the processes started together: it kills them all at once and
// shows their logs. Set BinDir and LogDir, if at all, before the first
// Start.
type Group struct {
	BinDir string // where a Spec's relative Path is found
	LogDir string // where a Spec without Log writes NAME.log

	mu  sync.Mutex
	all []*Process
}

// Process is one started program.
type Process struct {
	Name string
	Cmd  *exec.Cmd
	URL  string // http://Addr when the Spec had an Addr
	Log  string // the log file's path

	exited chan struct{} // closed once reaped and the log closed
}

// Start starts s and adds it to the group. It does not wait for anything.
func (g *Group) Start(s Spec) (*Process, error) {
	path := s.Path
	if !filepath.IsAbs(path) && g.BinDir != "" {
		path = filepath.Join(g.BinDir, path)
	}
	logPath := s.Log
	if logPath == "" {
		if g.LogDir == "" {
			return nil, fmt.Errorf("start %s: no log file: set the Spec's Log or the Group's LogDir", s.Name)
		}
		logPath = filepath.Join(g.LogDir, s.Name+".log")
	}
	env := s.Env
	if s.AddrVar != "" {
		if s.Addr == "" {
			var err error
			if s.Addr, err = FreeAddr(); err != nil {
				return nil, fmt.Errorf("start %s: %w", s.Name, err)
			}
		}
		if env == nil {
			env = os.Environ()
		}
		env = append(slices.Clip(env), s.AddrVar+"="+s.Addr)
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	cmd := exec.Command(path, s.Args...)
	cmd.Dir, cmd.Env = s.Dir, env
	cmd.Stdout, cmd.Stderr = f, f
	if s.OwnGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	child, err := childproc.StartInNetns(cmd, s.Netns) // dies with this process, not before
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	p := &Process{Name: s.Name, Cmd: cmd, Log: logPath, exited: make(chan struct{})}
	if s.Addr != "" {
		p.URL = "http://" + s.Addr
	}
	go func() { <-child.Exited(); f.Close(); close(p.exited) }()
	g.mu.Lock()
	g.all = append(g.all, p)
	g.mu.Unlock()
	return p, nil
}

// Processes lists every process the group started, in order.
func (g *Group) Processes() []*Process {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Process(nil), g.all...)
}

// Kill kills every process of the group and waits until each is reaped.
func (g *Group) Kill() {
	for _, p := range g.Processes() {
		_ = p.Kill()
	}
}

// Tails is the last lines of each process's log, headed by its name, for
// an error report.
func (g *Group) Tails(lines int) string {
	var b strings.Builder
	for _, p := range g.Processes() {
		if t := TailFile(p.Log, lines); t != "" {
			fmt.Fprintf(&b, "---- %s ----\n%s\n", p.Name, t)
		}
	}
	return b.String()
}

// Exited is closed once the process has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Signal sends sig; the error is os.ErrProcessDone once it has exited.
func (p *Process) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Kill sends SIGKILL (after SIGCONT, which a stopped process needs to
// notice anything else) and waits until the process is reaped. Its error
// is the signal's: os.ErrProcessDone when the process had already exited.
func (p *Process) Kill() error {
	_ = p.Signal(syscall.SIGCONT)
	err := p.Signal(syscall.SIGKILL)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-p.exited
	return err
}

// Stop sends SIGTERM and waits up to grace for the process to exit, then
// kills it. It reports whether the process exited on its own.
func (p *Process) Stop(grace time.Duration) bool {
	_ = p.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		_ = p.Kill()
		return false
	}
}

// Tail is the last lines of the process's log.
func (p *Process) Tail(lines int) string { return TailFile(p.Log, lines) }

// healthClient answers within a second or counts as not yet healthy.
var healthClient = &http.Client{Timeout: time.Second}

// WaitHealthy polls GET URL/healthz until it answers 200 and check, when
// not nil, accepts the body. It fails at once if the process exits, and
// when ctx ends; both errors carry the log's tail.
func (p *Process) WaitHealthy(ctx context.Context, check func(body []byte) bool) error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/healthz", nil)
		if err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		if resp, err := healthClient.Do(req); err == nil {
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && (check == nil || check(buf.Bytes())) {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited during start-up: %s\n%s", p.Name, p.Cmd.ProcessState, p.Tail(40))
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy: %w\n%s", p.Name, context.Cause(ctx), p.Tail(40))
		case <-tick.C:
		}
	}
}

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// TailFile is the last n lines of the file at path; "" if it cannot be
// read.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Build runs go build with flags (e.g. -race) on the packages, the
// binaries into dir. The go command must run inside the dts workspace.
func Build(ctx context.Context, dir string, flags []string, pkgs ...string) error {
	args := append(append([]string{"build"}, flags...), "-o", dir+string(filepath.Separator))
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}
