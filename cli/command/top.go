package command

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"
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
	// Status, Name and Queue filter the jobs table, as jobs ls does.
	Status, Name, Queue string
}

func (a *app) topCmd() *cobra.Command {
	var o TopOptions
	cmd := &cobra.Command{
		Use:   "top",
		Short: "A terminal dashboard: stats, the newest jobs and the workers, refreshed; ? lists the keys",
		Long: `A terminal dashboard: the counts of GET /stats, the newest jobs and the workers,
refreshed every --interval. Keys:

` + topKeys,
		Example: `  dtsctl top
  dtsctl top --status leased --queue reports --interval 1s`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error { return Top(cmd.Context(), a.c, o) }),
	}
	cmd.Flags().DurationVar(&o.Interval, "interval", DefaultInterval, "time between refreshes")
	cmd.Flags().StringVar(&o.Status, "status", "", "only jobs in this status")
	cmd.Flags().StringVar(&o.Name, "name", "", "only jobs of this type")
	cmd.Flags().StringVar(&o.Queue, "queue", "", "only jobs of this queue")
	return cmd
}

// topKeys is the help overlay's text (and top --help's).
const topKeys = `  Up/Down, j/k  select a row
  Tab           switch between the jobs and the workers
  Enter         the selected job's or worker's detail, kept up to date
  c             cancel the selected job once you press y (n keeps it)
  r             refresh now
  ?             this help
  Esc           close the detail, the help or the question
  q, Ctrl-C     quit`

// Pages of the dashboard.
const (
	pageMain    = "main"
	pageDetail  = "detail"
	pageHelp    = "help"
	pageConfirm = "confirm"
)

// Top runs the dashboard until ctx ends or the user presses q: the stats
// of GET /stats, the newest jobs of GET /jobs and the workers of GET
// /workers, refreshed every Interval. Enter shows the selected row's
// detail, c cancels the selected job once confirmed (POST
// /jobs/{id}/cancel), ? shows the keys.
func Top(ctx context.Context, c *client.Client, o TopOptions) error {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := &top{c: c, o: o, app: tview.NewApplication(), refresh: make(chan struct{}, 1), cancel: cancel}
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
	t.workers = tview.NewTable().SetSelectable(true, false).SetFixed(1, 0)
	t.workers.SetBorder(true).SetTitle(" workers ")
	t.footer = tview.NewTextView().SetText("Enter detail  c cancel  Tab jobs/workers  r refresh  ? help  q quit")
	main := tview.NewFlex().SetDirection(tview.FlexRow).
		AddItem(t.stats, 5, 0, false).AddItem(t.jobs, 0, 2, true).AddItem(t.workers, 0, 1, false).AddItem(t.footer, 1, 0, false)

	t.detail = tview.NewTextView().SetScrollable(true)
	t.detail.SetBorder(true)
	help := tview.NewTextView().SetText(topKeys)
	help.SetBorder(true).SetTitle(" keys ")
	t.confirm = tview.NewTextView().SetTextAlign(tview.AlignCenter)
	t.confirm.SetBorder(true).SetTitle(" confirm ")
	t.pages = tview.NewPages().
		AddPage(pageMain, main, true, true).
		AddPage(pageDetail, t.detail, true, false).
		AddPage(pageHelp, centered(help, 74, 10), true, false).
		AddPage(pageConfirm, centered(t.confirm, 70, 6), true, false)
	t.app.SetRoot(t.pages, true).SetFocus(t.jobs)
	t.app.SetInputCapture(func(ev *tcell.EventKey) *tcell.EventKey { return t.key(ctx, ev) })
	t.spawn(func() { t.loop(ctx) })
	go func() { <-ctx.Done(); t.stop() }()
	err := t.app.Run()
	t.stop()
	return err
}

// centered is p, w columns by h rows, in the middle of the screen over
// what is drawn beneath.
func centered(p tview.Primitive, w, h int) tview.Primitive {
	return tview.NewFlex().
		AddItem(nil, 0, 1, false).
		AddItem(tview.NewFlex().SetDirection(tview.FlexRow).
			AddItem(nil, 0, 1, false).AddItem(p, h, 0, true).AddItem(nil, 0, 1, false), w, 0, true).
		AddItem(nil, 0, 1, false)
}

type top struct {
	c       *client.Client
	o       TopOptions
	app     *tview.Application
	pages   *tview.Pages
	stats   *tview.TextView
	jobs    *tview.Table
	workers *tview.Table
	footer  *tview.TextView
	detail  *tview.TextView
	confirm *tview.TextView
	refresh chan struct{}

	// pending is the id of the job the confirm page asks about, back the
	// table an overlay returns to; UI goroutine only.
	pending string
	back    tview.Primitive

	mu       sync.Mutex
	open     detailOf // the detail page's row; zero while it is closed
	stopping bool     // set once: no goroutine is spawned after it
	wg       sync.WaitGroup
	cancel   context.CancelFunc
}

func (t *top) isStopping() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopping
}

// spawn runs f on a goroutine of its own, unless the dashboard is
// stopping. Such goroutines draw through QueueUpdateDraw, which never
// returns once the UI loop has ended: stop waits for them first.
func (t *top) spawn(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopping {
		return
	}
	t.wg.Go(f)
}

// stop ends the dashboard from any goroutine: it cancels the requests in
// flight, lets the UI loop run until the goroutines that draw have
// returned, then stops it.
func (t *top) stop() {
	t.mu.Lock()
	already := t.stopping
	t.stopping = true
	t.mu.Unlock()
	if already {
		return
	}
	t.cancel()
	go func() {
		t.wg.Wait()
		t.app.Stop()
	}()
}

// detailOf is what the detail page shows: a job or a worker.
type detailOf struct{ kind, id string }

func (t *top) showing() detailOf {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open
}

func (t *top) setShowing(s detailOf) {
	t.mu.Lock()
	t.open = s
	t.mu.Unlock()
}

// key handles a key press on the UI goroutine: on an overlay its keys,
// else the dashboard's. A key it does not use goes on to the focused
// table (selection, scrolling).
func (t *top) key(ctx context.Context, ev *tcell.EventKey) *tcell.EventKey {
	if ev.Key() == tcell.KeyCtrlC {
		t.stop()
		return nil
	}
	r := rune(0)
	if ev.Key() == tcell.KeyRune {
		r = ev.Rune()
	}
	switch front, _ := t.pages.GetFrontPage(); front {
	case pageConfirm:
		switch {
		case r == 'y' || r == 'Y':
			id := t.pending
			t.closeOverlay(pageConfirm)
			t.cancelJob(ctx, id)
		case r == 'n' || r == 'N' || ev.Key() == tcell.KeyEscape:
			t.closeOverlay(pageConfirm)
			t.footer.SetText("job " + t.pending + " kept")
		}
		return nil // nothing else until it is answered
	case pageDetail, pageHelp:
		switch {
		case ev.Key() == tcell.KeyEscape, r == 'q', r == '?' && front == pageHelp, ev.Key() == tcell.KeyEnter:
			t.closeOverlay(front)
			return nil
		case r == 'r':
			t.poke()
			return nil
		}
		return ev
	}
	switch {
	case r == 'q':
		t.stop()
	case r == 'r':
		t.poke()
	case r == '?':
		t.showOverlay(pageHelp)
	case r == 'c':
		t.askCancel()
	case ev.Key() == tcell.KeyTab, ev.Key() == tcell.KeyBacktab:
		if t.workers.HasFocus() {
			t.app.SetFocus(t.jobs)
		} else {
			t.app.SetFocus(t.workers)
		}
	case ev.Key() == tcell.KeyEnter:
		t.openDetail(ctx)
	default:
		return ev
	}
	return nil
}

// showOverlay shows a page over the dashboard, which gets the focus back
// when it closes.
func (t *top) showOverlay(page string) {
	t.back = t.jobs
	if t.workers.HasFocus() {
		t.back = t.workers
	}
	t.pages.ShowPage(page)
}

func (t *top) closeOverlay(page string) {
	t.pages.HidePage(page)
	if page == pageDetail {
		t.setShowing(detailOf{})
	}
	t.app.SetFocus(t.back)
}

// askCancel shows the confirmation for the selected job.
func (t *top) askCancel() {
	if t.workers.HasFocus() {
		t.footer.SetText("c cancels a job: Tab back to the jobs")
		return
	}
	id := selectedID(t.jobs)
	if id == "" {
		return
	}
	r, _ := t.jobs.GetSelection()
	name, status := t.jobs.GetCell(r, 1).Text, t.jobs.GetCell(r, 3).Text
	if client.Terminal(status) {
		t.footer.SetText(fmt.Sprintf("job %s is %s: nothing to cancel", id, status))
		return
	}
	what := "It will not run."
	if status == client.StatusLeased {
		what = "Its handler's context is canceled; it ends canceled when its attempt stops."
	}
	t.pending = id
	t.confirm.SetText(fmt.Sprintf("Cancel job %s (%s, %s)?\n%s\ny: cancel it   n or Esc: keep it", id, name, status, what))
	t.showOverlay(pageConfirm)
}

// openDetail shows the selected job's or worker's detail, fetched at
// once and again at every refresh while it is open.
func (t *top) openDetail(ctx context.Context) {
	s := detailOf{kind: "job", id: selectedID(t.jobs)}
	if t.workers.HasFocus() {
		s = detailOf{kind: "worker", id: selectedID(t.workers)}
	}
	if s.id == "" {
		return
	}
	t.setShowing(s)
	t.detail.SetTitle(fmt.Sprintf(" %s %s  (Esc back, r reload) ", s.kind, s.id))
	t.detail.SetText("loading…")
	t.detail.ScrollToBeginning()
	t.showOverlay(pageDetail)
	t.spawn(func() { t.loadDetail(ctx, s) })
}

// loadDetail fetches s and, if the detail page still shows it, draws it.
func (t *top) loadDetail(ctx context.Context, s detailOf) {
	var fields [][2]string
	switch s.kind {
	case "job":
		j, err := t.c.Get(ctx, s.id)
		if err != nil {
			fields = [][2]string{{"ERROR", err.Error()}}
			break
		}
		fields = jobFields(j)
	case "worker":
		w, err := t.c.Worker(ctx, s.id)
		if err != nil {
			fields = [][2]string{{"ERROR", err.Error()}}
			break
		}
		fields = workerFields(w)
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, f := range fields {
		fmt.Fprintf(tw, "%s:\t%s\n", f[0], f[1])
	}
	_ = tw.Flush()
	t.app.QueueUpdateDraw(func() {
		if t.showing() == s {
			t.detail.SetText(b.String())
		}
	})
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
		if s := t.showing(); s.id != "" {
			t.loadDetail(ctx, s)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-t.refresh:
		}
	}
}

// load fetches stats, jobs and workers and draws them.
func (t *top) load(ctx context.Context) {
	st, err := t.c.Stats(ctx)
	if err != nil {
		t.say("error: %v", err)
		return
	}
	page, err := t.c.List(ctx, client.ListParams{Status: t.o.Status, Name: t.o.Name, Queue: t.o.Queue, Limit: 100})
	if err != nil {
		t.say("error: %v", err)
		return
	}
	ws, err := t.c.Workers(ctx)
	if err != nil {
		t.say("error: %v", err)
		return
	}
	t.app.QueueUpdateDraw(func() {
		var b strings.Builder
		fmt.Fprintf(&b, "pending %d  leased %d  retrying %d  completed %d  failed %d  canceled %d\n",
			st.Jobs[client.StatusPending], st.Jobs[client.StatusLeased], st.Jobs[client.StatusRetrying],
			st.Jobs[client.StatusCompleted], st.Jobs[client.StatusFailed], st.Jobs[client.StatusCanceled])
		fmt.Fprintf(&b, "queue depth %d  dlq depth %d  oldest pending seconds %.1f\n", st.QueueDepth, st.DLQDepth, st.OldestPendingSeconds)
		fmt.Fprintf(&b, "workers: available %d  busy %d  draining %d  unavailable %d",
			st.Workers["available"], st.Workers["busy"], st.Workers["draining"], st.Workers["unavailable"])
		t.stats.SetText(b.String())

		rows := make([][]string, len(page.Jobs))
		for i, j := range page.Jobs {
			rows[i] = []string{j.JobID, j.Name, j.Queue, j.Status, fmt.Sprintf("%d/%d", j.Attempts, j.MaxRetries+1),
				fmtOpt(j.WorkerID), clip(fmtOpt(j.LastError), 40)}
		}
		fill(t.jobs, []string{"ID", "NAME", "QUEUE", "STATUS", "ATTEMPTS", "WORKER", "LAST ERROR"}, rows)
		rows = make([][]string, len(ws))
		for i, w := range ws {
			rows[i] = []string{w.WorkerID, w.State, itoa(w.InFlight), itoa(w.Concurrency),
				fmtSince(w.LastHeartbeatAt.Round(time.Second), time.Now().Round(time.Second)) + " ago", clip(strings.Join(w.JobTypes, ","), 40)}
		}
		fill(t.workers, []string{"ID", "STATE", "IN FLIGHT", "CONCURRENCY", "LAST HEARTBEAT", "JOB TYPES"}, rows)
	})
}

// fill redraws a table with rows, keeping the selected row's id selected.
func fill(tb *tview.Table, header []string, rows [][]string) {
	selected := selectedID(tb)
	tb.Clear()
	for i, h := range header {
		tb.SetCell(0, i, tview.NewTableCell(h).SetSelectable(false).SetAttributes(tcell.AttrBold))
	}
	sel := 1
	for r, row := range rows {
		for i, v := range row {
			tb.SetCell(r+1, i, tview.NewTableCell(v))
		}
		if row[0] == selected {
			sel = r + 1
		}
	}
	if len(rows) > 0 {
		tb.Select(sel, 0)
	}
}

// selectedID is the id (first column) of a table's selected row; "" when
// none is.
func selectedID(tb *tview.Table) string {
	r, _ := tb.GetSelection()
	if r < 1 || r >= tb.GetRowCount() {
		return ""
	}
	return tb.GetCell(r, 0).Text
}

// cancelJob runs on the UI goroutine; the request runs beside it.
func (t *top) cancelJob(ctx context.Context, id string) {
	t.footer.SetText("canceling " + id + "…")
	t.spawn(func() {
		sub, err := t.c.Cancel(ctx, id)
		if err != nil {
			t.say("cancel %s: %v", id, err)
			return
		}
		t.say("job %s %s", sub.JobID, sub.Status)
		t.poke()
	})
}

func (t *top) say(format string, a ...any) {
	if t.isStopping() {
		return // the requests' errors are those of the cancel
	}
	msg := fmt.Sprintf(format, a...)
	t.app.QueueUpdateDraw(func() { t.footer.SetText(msg) })
}
