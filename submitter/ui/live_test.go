package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/testwait"
)

// stream opens GET live on srv and sends the names of the events it
// reads to the returned channel, until the test ends.
func stream(t *testing.T, srv *httptest.Server, query string, header ...string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/live?"+query, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("live: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := make(chan string, 100)
	go func() {
		defer resp.Body.Close()
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				select {
				case events <- name:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return events
}

// batch reads the events up to the next "v" (one batch), within d.
func batch(t *testing.T, events <-chan string, d time.Duration) []string {
	t.Helper()
	var got []string
	deadline := time.After(d)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("stream ended after %v", got)
			}
			if e == "v" {
				return got
			}
			got = append(got, e)
		case <-deadline:
			t.Fatalf("no batch within %s (got %v)", d, got)
		}
	}
}

// TestLiveFanout: 50 open event streams cost the store at most two
// queries a second (the refresher's), and a change reaches every stream.
func TestLiveFanout(t *testing.T) {
	t.Parallel()
	c, f := newConsole(t, false)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	t.Cleanup(c.Close) // before srv.Close: it ends the streams
	const viewers = 50
	streams := make([]<-chan string, viewers)
	for i := range streams {
		streams[i] = stream(t, srv, "every=1")
	}
	for i, s := range streams { // no token: every topic at once
		if got := batch(t, s, 5*time.Second); len(got) != int(numTopics) {
			t.Fatalf("stream %d's first batch: %v", i, got)
		}
	}
	start, before := time.Now(), f.calls.Load()
	f.pending.Add(1)
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() {
			if got := batch(t, s, 3*time.Second); strings.Join(got, ",") != "stats,jobs" {
				t.Errorf("stream %d after a submission: %v, want stats,jobs", i, got)
			}
		})
	}
	wg.Wait()
	// Let a few more refreshes happen with the streams open.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-streams[0]:
		case <-time.After(time.Until(deadline)):
		}
	}
	elapsed := time.Since(start).Seconds()
	calls := f.calls.Load() - before
	if limit := int64(2*elapsed) + 1; calls > limit {
		t.Errorf("%d viewers made %d store calls in %.1f s, want at most %d (2 a second)", viewers, calls, elapsed, limit)
	}
	if n := c.snap.reads.Load(); n == 0 {
		t.Error("the refresher counted no reads")
	}
}

// TestLiveStream: a stream starts from the page's token (only what
// changed since), or a reconnect's Last-Event-ID; a bad period is 400;
// Close ends the streams.
func TestLiveStream(t *testing.T) {
	t.Parallel()
	c, f := newConsole(t, false)
	// The refresher's clock runs ahead on demand, so that the rollup,
	// read every rollupEvery, is due at the next read; set before the
	// first read starts the refresher's loop.
	var ahead atomic.Int64
	c.snap.now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	t.Cleanup(c.Close)
	snap, err := c.snap.get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tok := snap.V.token()
	if v, ok := parseToken(tok); !ok || v != snap.V {
		t.Fatalf("token %q does not read back", tok)
	}
	fromPage := stream(t, srv, "every=1&v="+tok)
	fromID := stream(t, srv, "every=1&v=bogus", "Last-Event-ID", tok)
	f.mu.Lock()
	f.rollup = []RollupRow{{Minute: time.Now().Truncate(time.Minute).Add(-time.Minute), Completed: 3}}
	f.mu.Unlock()
	f.pending.Add(2)
	ahead.Add(int64(rollupEvery))
	for name, s := range map[string]<-chan string{"page": fromPage, "reconnect": fromID} {
		got := batch(t, s, 20*time.Second)
		for len(got) < 3 {
			got = append(got, batch(t, s, 20*time.Second)...)
		}
		if strings.Join(got, ",") != "stats,jobs,charts" && strings.Join(got, ",") != "stats,jobs,stats,charts" {
			t.Errorf("%s: %v, want stats, jobs and charts, not workers", name, got)
		}
	}
	for _, q := range []string{"every=3", "every=", "every=1e9"} {
		if w := serve(c, "GET", "/live?"+q, "", nil); w.Code != http.StatusBadRequest {
			t.Errorf("live?%s: %d, want 400", q, w.Code)
		}
	}
	c.Close()
	select {
	case _, ok := <-fromPage:
		for ok {
			_, ok = <-fromPage
		}
	case <-time.After(5 * time.Second):
		t.Error("Close left a stream open")
	}
}

// TestLivePoll: the fallback poll names the topics changed since a token
// from the snapshot, with no store query of its own.
func TestLivePoll(t *testing.T) {
	t.Parallel()
	c, f := newConsole(t, false)
	t.Cleanup(c.Close)
	var first pollAnswer
	w := serve(c, "GET", "/live/poll", "", nil)
	if err := json.Unmarshal(w.Body.Bytes(), &first); err != nil || len(first.Changed) != int(numTopics) {
		t.Fatalf("first poll: %d %s", w.Code, w.Body)
	}
	calls := f.calls.Load()
	var again pollAnswer
	for range 20 {
		w = serve(c, "GET", "/live/poll?v="+first.V, "", nil)
		if err := json.Unmarshal(w.Body.Bytes(), &again); err != nil || again.V != first.V || len(again.Changed) != 0 {
			t.Fatalf("poll with the current token: %s", w.Body)
		}
	}
	if n := f.calls.Load() - calls; n > 3 {
		t.Errorf("20 polls made %d store calls", n)
	}
}

// TestSharedJobLists: live refreshes of one search share one list query
// per jobs version; a search typed by the user is read for itself.
func TestSharedJobLists(t *testing.T) {
	t.Parallel()
	c, f := newConsole(t, false)
	t.Cleanup(c.Close)
	if _, err := c.snap.get(t.Context()); err != nil {
		t.Fatal(err)
	}
	count := func() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.lists) }
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() {
			if w := serve(c, "GET", "/jobs?q=state:failed&live=1", "", nil, "HX-Request", "true"); w.Code != 200 || !strings.Contains(w.Body.String(), `data-job-id="2"`) {
				t.Errorf("live refresh: %d", w.Code)
			}
		})
	}
	wg.Wait()
	if n := count(); n != 1 {
		t.Errorf("30 live refreshes ran %d list queries, want 1", n)
	}
	serve(c, "GET", "/jobs?q=state:failed", "", nil)
	if n := count(); n != 2 {
		t.Errorf("a search ran %d list queries in all, want 2", n)
	}
}

// TestCharts: the Overview draws the rollup as inline SVG, per name,
// with Grafana links when configured; a bad name is 400.
func TestCharts(t *testing.T) {
	t.Parallel()
	f := newFake()
	now := time.Now().Truncate(time.Minute)
	p50, p95 := 12.0, 80.0
	for i := 1; i <= 30; i++ {
		m := now.Add(-time.Duration(i) * time.Minute)
		f.rollup = append(f.rollup,
			RollupRow{Minute: m, Completed: int64(i), Failed: 1, Started: 5, StartP50: &p50, StartP95: &p95, QueueDepth: 7, OldestPending: 3},
			RollupRow{Minute: m, Name: hostile, Completed: 2})
	}
	c, err := New(f, Config{GrafanaURL: "http://grafana.example:3000/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	body := checkPage(t, "overview", serve(c, "GET", "/", "", nil), 200)
	for _, want := range []string{`<svg viewBox="0 0 600 170" role="img"`, `<polyline class="line s-ok" points="`, `id="chart-wait"`,
		`href="http://grafana.example:3000/d/dts-overview/dts?from=now-1h&amp;to=now&amp;viewPanel=102"`, `hx-trigger="sse:charts"`,
		`>p95 <span class="muted">80 ms</span>`, `<option value="&lt;script&gt;`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	w := serve(c, "GET", "/charts?name="+url.QueryEscape(hostile), "", nil)
	frag := w.Body.String()
	if w.Code != 200 || strings.Contains(frag, "<html") || !strings.Contains(frag, `<section id="charts"`) || strings.Contains(frag, "<script") {
		t.Errorf("charts fragment: %d %.300s", w.Code, frag)
	}
	if strings.Count(frag, "no data in the last hour") != 1 { // the name has no starts: no submit-to-start
		t.Errorf("charts of the name: %d empty charts, want 1", strings.Count(frag, "no data in the last hour"))
	}
	checkPage(t, "long name", serve(c, "GET", "/?name="+strings.Repeat("n", 129), "", nil), http.StatusBadRequest)
	off, _ := newConsole(t, false)
	if body := serve(off, "GET", "/", "", nil).Body.String(); strings.Contains(body, "grafana") || !strings.Contains(body, "no data in the last hour") {
		t.Error("without GRAFANA_URL or data: links, or no empty charts")
	}
}

// TestLiveNudge: a change this process made (Changed) reaches open streams
// before the refresher's next timed read, and a flood of them still costs
// at most two reads per interval.
func TestLiveNudge(t *testing.T) {
	t.Parallel()
	f := newFake()
	const interval = 4 * time.Second
	c, err := New(f, Config{StatsInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	t.Cleanup(c.Close)
	s := stream(t, srv, "every=1")
	batch(t, s, 5*time.Second) // the first: every topic
	opened := time.Now()
	testwait.For(t, interval, "the least gap between reads to pass", func() bool {
		c.snap.mu.Lock()
		defer c.snap.mu.Unlock()
		return c.snap.now().Sub(c.snap.last.At) > c.snap.minGap
	})
	before := f.calls.Load()
	f.pending.Add(1)
	changed := time.Now()
	c.Changed()
	if got := batch(t, s, interval/2); strings.Join(got, ",") != "stats,jobs" {
		t.Fatalf("after a nudge: %v, want stats,jobs", got)
	}
	if d := time.Since(changed); d > time.Second {
		t.Errorf("the nudged change took %s to arrive", d)
	}
	// A flood of nudges: reads stay at most one per half interval.
	stop := time.After(interval)
	for flood := true; flood; {
		select {
		case <-stop:
			flood = false
		case <-time.After(10 * time.Millisecond):
			c.Changed()
		case <-s:
		}
	}
	elapsed := time.Since(opened)
	limit := int64(2*elapsed/interval) + 2
	if calls := f.calls.Load() - before; calls > limit {
		t.Errorf("%d store calls in %s of nudges, want at most %d (two per interval)", calls, elapsed, limit)
	}
}

// TestLiveSlowReads: when the counts take long to read (a large table),
// the refresher spaces its reads to readShare times their duration, for
// open streams and for pages asking again and again alike, so it keeps
// PostgreSQL busy a bounded share of the time.
func TestLiveSlowReads(t *testing.T) {
	t.Parallel()
	f := newFake()
	const took = 150 * time.Millisecond // with an interval of 50 ms: reads every 750 ms, not 200
	f.slow.Store(int64(took))
	c, err := New(f, Config{StatsInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	t.Cleanup(c.Close)
	s := stream(t, srv, "every=1")
	batch(t, s, 5*time.Second)
	start, before := time.Now(), f.stats.Load()
	for time.Since(start) < 3*time.Second { // a page every 20 ms
		if w := serve(c, "GET", "/", "", nil); w.Code != http.StatusOK {
			t.Fatalf("overview: %d", w.Code)
		}
		select {
		case <-s:
		case <-time.After(20 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	reads := f.stats.Load() - before
	if limit := int64(elapsed/(readShare*took)) + 2; reads > limit {
		t.Errorf("%d reads of %s each in %s, want at most %d (one per %s)", reads, took, elapsed.Round(time.Millisecond), limit, readShare*took)
	}
	if reads < 2 {
		t.Errorf("%d reads in %s: the refresher stopped", reads, elapsed)
	}
}

// TestAgedSnapshotServedAtOnce: a page asked for after the refresher sat
// idle gets the old snapshot (with its age) within agedWait instead of
// waiting for a slow read; the read goes on, and the next page has it.
func TestAgedSnapshotServedAtOnce(t *testing.T) {
	t.Parallel()
	f := newFake()
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	r := newRefresher(f, 50*time.Millisecond, now)
	t.Cleanup(r.close)
	first, err := r.get(t.Context())
	if err != nil || first.At.IsZero() {
		t.Fatalf("first get: %+v, %v", first, err)
	}
	clock.Add(int64(2 * idleAfter)) // nobody looked for a while
	f.slow.Store(int64(time.Second))
	start := time.Now()
	old, err := r.get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > agedWait+400*time.Millisecond {
		t.Errorf("a page after an idle spell waited %s for a read of 1 s", took)
	}
	if !old.At.Equal(first.At) {
		t.Errorf("got a snapshot of %s, want the old one of %s", old.At, first.At)
	}
	testwait.For(t, 5*time.Second, "the read asked for to land", func() bool {
		snap, _ := r.latest()
		return snap.At.After(first.At)
	})
}

// TestWarmFirstOverview: Warm (the submitter calls it when it starts
// serving) reads the counts once ahead of the first viewer, and no more
// while nobody looks; the first Overview is served from that read instead
// of waiting for one of its own.
func TestWarmFirstOverview(t *testing.T) {
	t.Parallel()
	warm := func(t *testing.T, interval time.Duration) (*Console, *fakeService) {
		f := newFake()
		f.slow.Store(int64(20 * time.Millisecond))
		c, err := New(f, Config{StatsInterval: interval})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		_, fresh := c.snap.latest()
		c.Warm()
		select {
		case <-fresh:
		case <-time.After(5 * time.Second):
			t.Fatal("Warm read nothing")
		}
		return c, f
	}
	t.Run("first overview", func(t *testing.T) {
		t.Parallel()
		c, f := warm(t, time.Hour)
		if w := serve(c, "GET", "/", "", nil); w.Code != http.StatusOK {
			t.Fatalf("overview: %d", w.Code)
		}
		if n := f.stats.Load(); n != 1 {
			t.Errorf("the first overview made a read of its own (%d reads in all): it waited for the counts", n)
		}
	})
	t.Run("nobody looks", func(t *testing.T) {
		t.Parallel()
		const interval = 20 * time.Millisecond
		c, f := warm(t, interval)
		// Idle, the loop reads again only when someone looks; a viewer
		// would have had a read every interval.
		testwait.For(t, 5*time.Second, "the refresher to go idle", func() bool { return c.snap.idles.Load() > 0 })
		if n := f.stats.Load(); n != 1 {
			t.Errorf("Warm made %d reads with nobody looking, want 1", n)
		}
	})
}
