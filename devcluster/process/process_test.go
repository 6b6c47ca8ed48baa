package process

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dtsched/dts/internal/testwait"
)

// TestMain is also TestWaitHealthy's server: the test binary run again
// with DEVCLUSTER_HELPER_ADDR set serves /healthz there until killed.
func TestMain(m *testing.M) {
	if addr := os.Getenv("DEVCLUSTER_HELPER_ADDR"); addr != "" {
		http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, nil))
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

func shell(name, script string) Spec {
	return Spec{Name: name, Path: "/bin/sh", Args: []string{"-c", script}, Env: []string{"PATH=" + os.Getenv("PATH")}}
}

// A process's output lands in its log; Stop ends one that honours SIGTERM
// and kills one that does not; Kill of an exited process says so.
func TestStartStopKill(t *testing.T) {
	if _, err := (&Group{}).Start(shell("nowhere", "true")); err == nil || !strings.Contains(err.Error(), "no log file") {
		t.Errorf("Start without a log file: %v", err)
	}
	g := &Group{LogDir: t.TempDir()}
	polite, err := g.Start(shell("polite", `trap 'echo bye; exit 0' TERM; echo hello; while :; do sleep 0.05; done`))
	if err != nil {
		t.Fatal(err)
	}
	stubborn := MustStart(t, g, shell("stubborn", `trap '' TERM; echo ready; while :; do sleep 0.05; done`))
	for _, p := range []*Process{polite, stubborn} {
		// Its first line is written once its trap is set.
		testwait.For(t, 10*time.Second, p.Name+"'s first line", func() bool { return p.Tail(1) != "" })
	}
	if !polite.Stop(10 * time.Second) {
		t.Errorf("polite did not exit on SIGTERM:\n%s", polite.Tail(5))
	}
	if got := polite.Tail(2); got != "hello\nbye" {
		t.Errorf("polite's log = %q", got)
	}
	if stubborn.Stop(200 * time.Millisecond) {
		t.Error("stubborn exited on SIGTERM, which it ignores")
	}
	if stubborn.Running() {
		t.Error("stubborn still running after Stop")
	}
	if err := stubborn.Kill(); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Kill of an exited process: %v, want os.ErrProcessDone", err)
	}
	if got := g.Tails(1); got != "---- polite ----\nbye\n---- stubborn ----\nready\n" {
		t.Errorf("Tails = %q", got)
	}
}

// WaitHealthy returns once /healthz answers 200, fails at once when the
// process exits, and Group.Kill leaves nothing running.
func TestWaitHealthy(t *testing.T) {
	g := &Group{LogDir: t.TempDir()}
	t.Cleanup(g.Kill)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// This test binary serves /healthz when asked to (TestMain).
	s := Spec{Name: "server", Path: bin, Env: []string{},
		AddrVar: "DEVCLUSTER_HELPER_ADDR"} // on a free port
	server := MustStart(t, g, s)
	if !strings.HasPrefix(server.URL, "http://127.0.0.1:") {
		t.Errorf("URL = %q, want a loopback address", server.URL)
	}
	if err := server.WaitHealthy(ctx, func(body []byte) bool { return string(body) == "ok" }); err != nil {
		t.Fatal(err)
	}

	quitter := MustStart(t, g, shell("quitter", "echo no such luck; exit 3"))
	err = quitter.WaitHealthy(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "exited during start-up: exit status 3") || !strings.Contains(err.Error(), "no such luck") {
		t.Errorf("WaitHealthy of an exiting process: %v", err)
	}

	g.Kill()
	for _, p := range g.Processes() {
		if p.Running() {
			t.Errorf("%s running after Group.Kill", p.Name)
		}
	}
}
