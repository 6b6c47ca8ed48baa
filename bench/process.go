package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/dtsched/dts/internal/childproc"
)

// proc is one service process the bench started, through childproc.Start
// so that it dies with the bench and not before.
type proc struct {
	name    string
	cmd     *exec.Cmd
	url     string // http://127.0.0.1:PORT
	logPath string
	exited  chan struct{} // closed once reaped
	// workerIDs are the ids of the workers it runs (a worker process one,
	// a fleetworker many); none for the other services.
	workerIDs []string
}

// startProc starts bin with env (and nothing else of our environment but
// PATH and HOME), its output in logPath, in its own process group (a ^C at
// the terminal reaches only the bench, which then kills it), and killed by
// the kernel if the bench dies.
func startProc(name, bin, logPath, addr string, env []string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	child, err := childproc.Start(cmd) // dies with the bench, not before
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, url: "http://" + addr, logPath: logPath, exited: make(chan struct{})}
	go func() { <-child.Exited(); f.Close(); close(p.exited) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop sends SIGTERM and waits up to grace for a clean exit, then kills.
func (p *proc) stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.kill()
	}
}

// waitHealthy polls GET /healthz until it answers 200 and, when check is
// set, check accepts the body.
func (p *proc) waitHealthy(ctx context.Context, timeout time.Duration, check func(body []byte) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/healthz", nil)
		if resp, err := client.Do(req); err == nil {
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && (check == nil || check(buf.Bytes())) {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited during start-up: %s\n%s", p.name, p.cmd.ProcessState, tailFile(p.logPath, 20))
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy after %v\n%s", p.name, timeout, tailFile(p.logPath, 20))
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// freeAddr returns a 127.0.0.1 address with a port free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func tailFile(path string, n int) string {
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

// buildBinaries builds the three services, without -race, into dir. The go
// command must run inside the dts workspace.
func buildBinaries(ctx context.Context, dir string) error {
	args := []string{"build", "-o", dir + "/"}
	for _, b := range []string{"submitter", "coordinator", "worker", "bench"} {
		cmd := b
		if b == "bench" {
			cmd = "fleetworker"
		}
		args = append(args, "github.com/dtsched/dts/"+b+"/cmd/"+cmd)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || len(out) > 0 {
			return fmt.Errorf("go build: %w\n%s(run the bench from the dts workspace, or pass -bin-dir)", err, out)
		}
		return fmt.Errorf("go build: %w", err)
	}
	return nil
}
