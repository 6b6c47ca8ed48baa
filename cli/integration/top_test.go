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
	"github.com/dtsched/dts/worker"
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

// waitScreenLacks waits until the screen shows none of gone.
func waitScreenLacks(t *testing.T, s *shown, gone ...string) {
	t.Helper()
	testwait.NoError(t, 15*time.Second, fmt.Sprintf("the screen to lose %q", gone), func() error {
		s.mu.Lock()
		text := s.text
		s.mu.Unlock()
		for _, g := range gone {
			if strings.Contains(text, g) {
				return fmt.Errorf("%q still in:\n%s", g, text)
			}
		}
		return nil
	})
}

// TestTop drives the dashboard headlessly: it shows the stats, jobs and
// workers; c asks before it cancels the selected (newest) job, and n
// keeps it; Enter shows the selected job's or worker's detail, ? the keys.
func TestTop(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.run(map[string]worker.HandlerFunc{"noop": func(ctx context.Context, j *worker.Job) (any, error) { return nil, nil }})
	s.ok("submit", "first", "--delay", "1h", "--payload", `{"n":1}`)
	s.ok("submit", "second", "--delay", "1h", "--payload", `{"n":2}`)
	c, err := client.New(client.Config{BaseURL: s.url})
	if err != nil {
		t.Fatal(err)
	}
	screen := tcell.NewSimulationScreen("UTF-8")
	screen.SetSize(120, 40)
	sh := &shown{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- command.Top(ctx, c, command.TopOptions{Screen: screen, AfterDraw: sh.afterDraw, Interval: 100 * time.Millisecond})
	}()
	key := func(k tcell.Key) { screen.InjectKey(k, 0, tcell.ModNone) }
	press := func(r rune) { screen.InjectKey(tcell.KeyRune, r, tcell.ModNone) }

	waitScreen(t, sh, "pending 2", "second", "first", "w1")
	press('c')
	waitScreen(t, sh, "Cancel job 2 (second, pending)?")
	press('n')
	waitScreenLacks(t, sh, "Cancel job 2")
	if j, err := c.Get(ctx, "2"); err != nil || j.Status != client.StatusPending {
		t.Errorf("job 2 after c, n: %+v, %v", j, err)
	}
	press('c')
	waitScreen(t, sh, "Cancel job 2 (second, pending)?")
	press('y')
	waitScreen(t, sh, "job 2 canceled", "pending 1", "canceled 1")
	if j, err := c.Get(ctx, "2"); err != nil || j.Status != client.StatusCanceled {
		t.Errorf("job 2 after c, y: %+v, %v", j, err)
	}
	press('c')
	waitScreen(t, sh, "job 2 is canceled: nothing to cancel")

	key(tcell.KeyEnter)
	waitScreen(t, sh, " job 2 ", `PAYLOAD:`, `{"n":2}`, "canceled")
	key(tcell.KeyEscape)
	waitScreenLacks(t, sh, `PAYLOAD:`)
	press('?')
	waitScreen(t, sh, "Enter", "the selected job's or worker's detail", "Tab")
	key(tcell.KeyEscape)
	waitScreenLacks(t, sh, "the selected job's or worker's detail")
	key(tcell.KeyTab)
	key(tcell.KeyEnter)
	waitScreen(t, sh, " worker w1 ", "LAST HEARTBEAT:", "JOB TYPES:", "noop")
	key(tcell.KeyEscape)
	waitScreenLacks(t, sh, "LAST HEARTBEAT:")

	press('q')
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Top: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("q did not stop top")
	}
}
