package childproc

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

func TestStartReapsAndSurvivesThreadChurn(t *testing.T) {
	p, err := Start(exec.Command("sleep", "1"))
	if err != nil {
		t.Fatal(err)
	}
	// Goroutines that lock and exit end their threads; the child must live on.
	for i := 0; i < 20; i++ {
		done := make(chan struct{})
		go func() { runtime.LockOSThread(); close(done) }()
		<-done
	}
	if !Alive(p.Cmd.Process.Pid) {
		t.Fatal("child died while other threads ended")
	}
	select {
	case <-p.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("child not reaped after it exited")
	}
	if Alive(p.Cmd.Process.Pid) {
		t.Fatal("Alive is true for a reaped child")
	}
}

func TestAliveAndFreePort(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Fatal("Alive(self) = false")
	}
	port, err := FreePort()
	if err != nil || port <= 0 {
		t.Fatalf("FreePort = %d, %v", port, err)
	}
}
