package command

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gdamore/tcell/v2"
	"github.com/rivo/tview"
	"github.com/spf13/cobra"

	"github.com/dtsched/dts/client"
)

// TopOptions configures Top.
type TopOptions struct {
	// Screen draws the dashboard; nil: the terminal. Tests pass a
	// tcell.SimulationScreen.
	Screen tcell.Screen
	// Interval is the time between two refreshes. Default DefaultInterval.
	Interval time.Duration
	// AfterDraw, when set, is called on the UI goroutine after each draw
	// (tests read a simulation screen's contents there, race-free).
	AfterDraw func(tcell.Screen)
	// Status and Name filter the jobs table, as jobs ls does.
	Status, Name string
}

func (a *app) topCmd() *cobra.Command {
	var o TopOptions
	cmd := &cobra.Command{
		Use:   "top",
		Short: "A terminal dashboard: stats and the newest jobs, refreshed; c cancels the selected job, q quits",
		Example: `  dtsctl top
  dtsctl top --status leased --interval 1s`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error { return Top(cmd.Context(), a.c, o) }),
	}
	cmd.Flags().DurationVar(&o.Interval, "interval", DefaultInterval, "time between refreshes")
	cmd.Flags().StringVar(&o.Status, "status", "", "only jobs in this status")
	cmd.Flags().StringVar(&o.Name, "name", "", "only jobs of this type")
	return cmd
}

// Top runs the dashboard until ctx ends or the user presses q: the stats
// of GET /stats, the newest jobs of GET /jobs, refreshed every Interval;
// c cancels the selected job (POST /jobs/{id}/cancel), r refreshes now.
func Top(ctx context.Context, c *client.Client, o TopOptions) error {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := &top{c: c, o: o, app: tview.NewApplication(), refresh: make(chan struct{}, 1)}
	if o.Screen != nil {
		t.app.SetScreen(o.Screen)
	}
	if o.AfterDraw != nil {
		t.app.SetAfterDrawFunc(o.AfterDraw)
	}
	t.stats = tview.NewTextView().SetDynamicColors(true)
	t.stats.SetBorder(true).SetTitle(" dts ")
	t.jobs = tview.NewTable().SetSelectable(true, false).SetFixed(1, 0)
	t.jobs.SetBorder(true).SetTitle(" jobs ")
	t.footer = tview.NewTextView().SetText("c cancel selected  r refresh  q quit")
	t.app.SetRoot(tview.NewFlex().SetDirection(tview.FlexRow).
		AddItem(t.stats, 5, 0, false).AddItem(t.jobs, 0, 1, true).AddItem(t.footer, 1, 0, false), true)
	t.app.SetInputCapture(func(ev *tcell.EventKey) *tcell.EventKey {
		switch {
		case ev.Key() == tcell.KeyRune && ev.Rune() == 'q', ev.Key() == tcell.KeyCtrlC:
			t.app.Stop()
			return nil
		case ev.Key() == tcell.KeyRune && ev.Rune() == 'r':
			t.poke()
			return nil
		case ev.Key() == tcell.KeyRune && ev.Rune() == 'c':
			t.cancelSelected(ctx)
			return nil
		}
		return ev
	})
	go t.loop(ctx)
	go func() { <-ctx.Done(); t.app.Stop() }()
	return t.app.Run()
}

type top struct {
	c       *client.Client
	o       TopOptions
	app     *tview.Application
	stats   *tview.TextView
	jobs    *tview.Table
	footer  *tview.TextView
	refresh chan struct{}
}

func (t *top) poke() {
	select {
	case t.refresh <- struct{}{}:
	default:
	}
}

func (t *top) loop(ctx context.Context) {
	tick := time.NewTicker(t.o.Interval)
	defer tick.Stop()
	for {
		t.load(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-t.refresh:
		}
	}
}

// load fetches stats and jobs and draws them.
func (t *top) load(ctx context.Context) {
	st, err := t.c.Stats(ctx)
	if err != nil {
		t.say("error: %v", err)
		return
	}
	page, err := t.c.List(ctx, client.ListParams{Status: t.o.Status, Name: t.o.Name, Limit: 100})
	if err != nil {
		t.say("error: %v", err)
		return
	}
	t.app.QueueUpdateDraw(func() {
		var b strings.Builder
		fmt.Fprintf(&b, "pending %d  leased %d  retrying %d  completed %d  failed %d  canceled %d\n",
			st.Jobs[client.StatusPending], st.Jobs[client.StatusLeased], st.Jobs[client.StatusRetrying],
			st.Jobs[client.StatusCompleted], st.Jobs[client.StatusFailed], st.Jobs[client.StatusCanceled])
		fmt.Fprintf(&b, "queue depth %d  dlq %d  oldest pending %.1fs\n", st.QueueDepth, st.DLQDepth, st.OldestPendingSeconds)
		fmt.Fprintf(&b, "workers: available %d  busy %d  draining %d  unavailable %d",
			st.Workers["available"], st.Workers["busy"], st.Workers["draining"], st.Workers["unavailable"])
		t.stats.SetText(b.String())

		selected := t.selectedID()
		t.jobs.Clear()
		for i, h := range []string{"ID", "NAME", "QUEUE", "STATUS", "ATTEMPTS", "WORKER", "LAST ERROR"} {
			t.jobs.SetCell(0, i, tview.NewTableCell(h).SetSelectable(false).SetAttributes(tcell.AttrBold))
		}
		row := 1
		for r, j := range page.Jobs {
			for i, v := range []string{j.JobID, j.Name, j.Queue, j.Status, fmt.Sprintf("%d/%d", j.Attempts, j.MaxRetries+1),
				fmtOpt(j.WorkerID), clip(fmtOpt(j.LastError), 40)} {
				t.jobs.SetCell(r+1, i, tview.NewTableCell(v))
			}
			if j.JobID == selected {
				row = r + 1
			}
		}
		if len(page.Jobs) > 0 {
			t.jobs.Select(row, 0)
		}
	})
}

func (t *top) selectedID() string {
	r, _ := t.jobs.GetSelection()
	if r < 1 || r >= t.jobs.GetRowCount() {
		return ""
	}
	return t.jobs.GetCell(r, 0).Text
}

// cancelSelected runs on the UI goroutine; the request runs beside it.
func (t *top) cancelSelected(ctx context.Context) {
	id := t.selectedID()
	if id == "" {
		return
	}
	t.footer.SetText("canceling " + id + "…")
	go func() {
		sub, err := t.c.Cancel(ctx, id)
		if err != nil {
			t.say("cancel %s: %v", id, err)
			return
		}
		t.say("job %s %s", sub.JobID, sub.Status)
		t.poke()
	}()
}

func (t *top) say(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	t.app.QueueUpdateDraw(func() { t.footer.SetText(msg) })
}
