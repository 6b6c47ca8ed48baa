package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdamore/tcell/v2"

	"github.com/dtsched/dts/cli/command"
	"github.com/dtsched/dts/client"
	"github.com/dtsched/dts/internal/testwait"
)

// screenText is what a simulation screen shows, a line per row.
func screenText(s tcell.SimulationScreen) string {
	cells, w, _ := s.GetContents()
	var b strings.Builder
	for i, c := range cells {
		if len(c.Runes) > 0 {
			b.WriteRune(c.Runes[0])
		} else {
			b.WriteByte(' ')
		}
		if (i+1)%w == 0 {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// shown is the screen's text as of the last draw, copied on the UI
// goroutine (a simulation screen's contents are not safe to read beside it).
type shown struct {
	mu   sync.Mutex
	text string
}

func (s *shown) afterDraw(sc tcell.Screen) {
	text := screenText(sc.(tcell.SimulationScreen))
	s.mu.Lock()
	s.text = text
	s.mu.Unlock()
}

// waitScreen waits until the screen shows every one of want.
func waitScreen(t *testing.T, s *shown, want ...string) {
	t.Helper()
	testwait.NoError(t, 15*time.Second, fmt.Sprintf("the screen to show %q", want), func() error {
		s.mu.Lock()
		text := s.text
		s.mu.Unlock()
		for _, w := range want {
			if !strings.Contains(text, w) {
				return fmt.Errorf("no %q in:\n%s", w, text)
			}
		}
		return nil
	})
}

// TestTop drives the dashboard headlessly: it shows the stats and jobs,
// and c cancels the selected (newest) job.
func TestTop(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.ok("submit", "first", "--delay", "1h")
	s.ok("submit", "second", "--delay", "1h")
	c, err := client.New(client.Config{BaseURL: s.url})
	if err != nil {
		t.Fatal(err)
	}
	screen := tcell.NewSimulationScreen("UTF-8")
	screen.SetSize(120, 30)
	sh := &shown{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- command.Top(ctx, c, command.TopOptions{Screen: screen, AfterDraw: sh.afterDraw, Interval: 100 * time.Millisecond})
	}()

	waitScreen(t, sh, "pending 2", "second", "first")
	screen.InjectKey(tcell.KeyRune, 'c', tcell.ModNone)
	waitScreen(t, sh, "job 2 canceled", "pending 1", "canceled 1")
	if j, err := c.Get(ctx, "2"); err != nil || j.Status != client.StatusCanceled {
		t.Errorf("job 2 after c: %+v, %v", j, err)
	}
	screen.InjectKey(tcell.KeyRune, 'q', tcell.ModNone)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Top: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("q did not stop top")
	}
}
