// Package childproc starts child processes that die with their parent, for
// the test harnesses (pgtest, redistest, e2e) and the benchmark, which start
// real servers and must never leave one behind.
//
// Why it is shaped this way: Linux's Pdeathsig fires when the OS *thread*
// that forked the child exits, not the process, and Go ends threads at will
// (a goroutine that exits while locked to its thread takes the thread with
// it). A child forked from an arbitrary thread is therefore SIGKILLed at a
// random moment. Start forks from a goroutine locked to its thread for the
// child's whole life; that goroutine reaps the child and only then ends, so
// the thread dies exactly when it no longer matters.
package childproc

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// Process is a child started by Start.
type Process struct {
	Cmd    *exec.Cmd
	exited chan struct{}
	netns  string // network namespace file to start the child in, or ""
}

// Start starts cmd with Pdeathsig SIGKILL (keeping the rest of its
// SysProcAttr) and reaps it when it exits.
func Start(cmd *exec.Cmd) (*Process, error) { return StartInNetns(cmd, "") }

// StartInNetns is Start with the child in the network namespace whose file
// is netns (/var/run/netns/NAME, as `ip netns add` makes), or in this
// process's when netns is "". The namespace is entered by the thread that
// forks the child, which no other goroutine ever runs on.
func StartInNetns(cmd *exec.Cmd, netns string) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	p := &Process{Cmd: cmd, exited: make(chan struct{}), netns: netns}
	started := make(chan error, 1)
	go p.supervise(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Process) supervise(started chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
	defer close(p.exited)
	if p.netns != "" {
		if err := setNetns(p.netns); err != nil {
			started <- err
			return
		}
	}
	if err := p.Cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	_ = p.Cmd.Wait()
}

// Exited is closed once the child has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Alive reports whether pid is a live (not zombie) process.
func Alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc: trust kill(0)
	}
	// "pid (comm) S ...": the state follows the last ')'.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
