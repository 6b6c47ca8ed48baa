package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
)

// Live updates (docs/ui.md, "Live updates").
//
// One refresher per Console (so per submitter process) reads what the
// pages show, the counts of GET /stats and GET /queues, the leader and the chart rollup,
// on its own clock, and only while someone looks: while an event stream
// is open or a page was served in the last idleAfter. Every viewer reads
// its latest snapshot; none makes a store query of its own for it. Each
// snapshot has a version per topic (the data behind one fragment of a
// page); a page holds one event stream (GET live), which names the topics
// whose version changed, at most once per the refresh period the viewer
// chose; the page then re-fetches those fragments only. When the stream
// cannot be held (a proxy that buffers, too many streams), the page polls
// GET live/poll instead, which answers the same from the snapshot.
//
// What must stay true: the store is read by the refresher's loop only
// (the Jobs page's refreshes share one list per search and snapshot), so
// the console's queries do not grow with its viewers.

// topic is the data behind one fragment of a page.
type topic int

const (
	topicStats   topic = iota // the Overview's counts, leader and workers
	topicJobs                 // job counts by state: the Jobs list may have changed
	topicCharts               // the chart rollup
	topicWorkers              // workers by state
	numTopics
)

var topicNames = [numTopics]string{"stats", "jobs", "charts", "workers"}

// versions are a snapshot's topic versions; its token ("1a2b.3c4d...")
// is what a page was rendered with and an event stream starts from.
type versions [numTopics]uint32

func (v versions) token() string {
	parts := make([]string, numTopics)
	for i, n := range v {
		parts[i] = strconv.FormatUint(uint64(n), 36)
	}
	return strings.Join(parts, ".")
}

var tokenRe = regexp.MustCompile(`^[0-9a-z]{1,7}(\.[0-9a-z]{1,7}){3}$`)

// parseToken reads a token; ok is false for anything else (then every
// topic counts as changed).
func parseToken(s string) (v versions, ok bool) {
	if !tokenRe.MatchString(s) {
		return v, false
	}
	for i, p := range strings.Split(s, ".") {
		n, err := strconv.ParseUint(p, 36, 32)
		if err != nil {
			return v, false
		}
		v[i] = uint32(n)
	}
	return v, true
}

// changed lists the topics whose versions differ from old's.
func (v versions) changed(old versions, known bool) []string {
	var out []string
	for i := range v {
		if !known || v[i] != old[i] {
			out = append(out, topicNames[i])
		}
	}
	return out
}

func hashOf(vs ...any) uint32 {
	h := fnv.New32a()
	for _, v := range vs {
		b, _ := json.Marshal(v) // maps come out with sorted keys
		_, _ = h.Write(b)
	}
	return h.Sum32()
}

// Timing of the refresher.
const (
	// idleAfter: with no stream open, the refresher stops reading this long
	// after the last page or poll it served.
	idleAfter = time.Minute
	// leaderEvery, rollupEvery: the leader and the rollup change rarely
	// (the rollup once a minute), so they are read less often than counts.
	leaderEvery = 5 * time.Second
	rollupEvery = 15 * time.Second
	// chartWindow is what the charts show.
	chartWindow = time.Hour
)

// overview is what the refresher read, at once.
type overview struct {
	At          time.Time
	Stats       wire.StatsResponse
	Leader      string
	LeaderEpoch int64
	Queues      []wire.QueueInfo // GET /queues
	Rollup      []RollupRow      // the last chartWindow, oldest first
	V           versions
}

// refresher keeps the snapshot every viewer of this process reads.
type refresher struct {
	svc      Service
	interval time.Duration
	now      func() time.Time

	reads atomic.Int64 // store calls made, for tests and nothing else
	idles atomic.Int64 // times the loop went idle, for tests and nothing else

	mu       sync.Mutex
	last     overview // zero At: never read
	err      error    // of the last read
	fresh    chan struct{}
	wanted   time.Time // the last page or poll served
	streams  int
	running  bool
	warm     bool // one read asked for by nobody watching (Console.Warm)
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	stopped  bool
	leaderAt time.Time
	rollupAt time.Time
	// staleBefore: snapshots read before it are out of date (this process
	// just changed what they show, invalidate).
	staleBefore time.Time
	// spacing is the period of the reads: interval, or readShare times
	// the last read's duration when that is more (a large table); pages
	// find the snapshot stale after it. minGap is the least time between
	// two reads when this process's own change brings one forward (nudge):
	// interval/2, or the last read's duration, so that a change shows
	// soon even on a large table while a flood of them keeps PostgreSQL
	// busy at most half the time.
	spacing, minGap time.Duration
}

// readShare bounds the share of time the refresher keeps PostgreSQL busy:
// a read that took d is followed by at least readShare*d before the next
// timed one (a nudge may come sooner: minGap).
// On a million jobs the count by state takes about 0.3 s; read every
// second it held a backend (and its parallel workers) busy a third of the
// time for as long as one page stayed open.
const readShare = 5

// agedWait is how long a page waits for a read when the snapshot it has
// is only old (the refresher was idle) before it shows the old one: a
// count by state of a million jobs takes 0.3-0.4 s.
const agedWait = 100 * time.Millisecond

// readTimeout bounds one read; it is not a viewer's to cancel, since
// other viewers wait for it.
const readTimeout = 5 * time.Second

func newRefresher(svc Service, interval time.Duration, now func() time.Time) *refresher {
	return &refresher{svc: svc, interval: interval, now: now, fresh: make(chan struct{}), wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), spacing: interval, minGap: interval / 2}
}

// demand notes a viewer and starts or wakes the loop. With stream set,
// the viewer holds an event stream until it calls release.
func (r *refresher) demand(stream bool) (ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return false
	}
	r.wanted = r.now()
	if stream {
		r.streams++
	}
	if !r.running {
		r.running = true
		go r.run()
	}
	if r.last.At.IsZero() || r.now().Sub(r.last.At) >= r.spacing || !r.last.At.After(r.staleBefore) { // stale: read now
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// warmUp asks for one read without counting as a viewer: the loop reads
// once, then idles until someone looks.
func (r *refresher) warmUp() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped || !r.last.At.IsZero() {
		return
	}
	r.warm = true
	if !r.running {
		r.running = true
		go r.run()
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *refresher) release() {
	r.mu.Lock()
	r.streams--
	r.mu.Unlock()
}

// get returns a snapshot at most two intervals old, waiting for the
// refresher's next read if it has none as fresh (it was idle).
func (r *refresher) get(ctx context.Context) (overview, error) {
	if !r.demand(false) {
		return overview{}, httpx.Errorf(http.StatusServiceUnavailable, wire.CodeUnavailable, "the console is shutting down")
	}
	for {
		r.mu.Lock()
		last, err, fresh, stale, spacing := r.last, r.err, r.fresh, r.staleBefore, r.spacing
		r.mu.Unlock()
		if !last.At.IsZero() && r.now().Sub(last.At) < 2*spacing && last.At.After(stale) {
			return last, nil
		}
		// Only old (the refresher was idle, nobody looked): wait a little
		// for the read just asked for, then show what there is, with its
		// age; the page's stream brings the fresh numbers when they come.
		// A first read, or one after an action (stale), is waited for.
		var giveUp <-chan time.Time
		if !last.At.IsZero() && last.At.After(stale) {
			t := time.NewTimer(agedWait)
			defer t.Stop()
			giveUp = t.C
		}
		select {
		case <-giveUp:
			return last, nil
		case <-fresh:
			r.mu.Lock()
			last, err, stale = r.last, r.err, r.staleBefore
			r.mu.Unlock()
			if err != nil {
				return overview{}, err
			}
			if !last.At.IsZero() && !last.At.After(stale) { // read before an invalidate: wait for the next
				if !r.demand(false) {
					return overview{}, httpx.Errorf(http.StatusServiceUnavailable, wire.CodeUnavailable, "the console is shutting down")
				}
				continue
			}
		case <-ctx.Done():
			if err != nil {
				return overview{}, err
			}
			return overview{}, ctx.Err()
		}
		if !last.At.IsZero() {
			return last, nil
		}
	}
}

// latest returns the newest snapshot and a channel closed at the next.
func (r *refresher) latest() (overview, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.fresh
}

func (r *refresher) run() {
	defer close(r.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-r.wake: // a viewer found the snapshot stale, or a nudge
			r.mu.Lock()
			since := r.now().Sub(r.last.At)
			invalid := !r.last.At.After(r.staleBefore)
			minGap := r.minGap
			r.mu.Unlock()
			if gap := minGap - since; gap > 0 && !invalid {
				select {
				case <-r.stop:
					return
				case <-time.After(gap):
				}
			}
		}
		r.mu.Lock()
		idle := r.streams == 0 && r.now().Sub(r.wanted) > idleAfter && !r.warm
		r.warm = false
		r.mu.Unlock()
		if idle {
			r.idles.Add(1)
			select {
			case <-r.stop:
				return
			case <-r.wake:
			}
			r.mu.Lock()
			r.warm = false // this read is the one asked for
			r.mu.Unlock()
		}
		start := time.Now()
		r.read()
		took := time.Since(start)
		r.mu.Lock()
		r.spacing, r.minGap = max(r.interval, readShare*took), max(r.interval/2, took)
		spacing := r.spacing
		r.mu.Unlock()
		select {
		case <-r.wake: // a demand while reading: no second read for it
		default:
		}
		t.Reset(spacing)
	}
}

// read reads the counts (and the leader and the rollup when due) and
// publishes the snapshot.
func (r *refresher) read() {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	now := r.now()
	r.mu.Lock()
	next := r.last
	r.mu.Unlock()
	var err error
	r.reads.Add(1)
	next.Stats, err = r.svc.Stats(ctx)
	if err == nil {
		r.reads.Add(1)
		var qs wire.QueueListResponse
		if qs, err = r.svc.Queues(ctx); err == nil {
			next.Queues = qs.Queues
		}
	}
	if err == nil && (next.At.IsZero() || now.Sub(r.leaderAt) >= leaderEvery) {
		r.reads.Add(1)
		if next.Leader, next.LeaderEpoch, err = r.svc.Leader(ctx); err == nil {
			r.leaderAt = now
		}
	}
	// The rollup: every rollupEvery, and at once when a new minute has
	// probably been written.
	if err == nil && (now.Sub(r.rollupAt) >= rollupEvery || now.Truncate(time.Minute).After(r.rollupAt.Truncate(time.Minute))) {
		r.reads.Add(1)
		var rows []RollupRow
		if rows, err = r.svc.Rollup(ctx, now.Add(-chartWindow).Truncate(time.Minute)); err == nil {
			next.Rollup, r.rollupAt = rows, now
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
	if err == nil {
		next.At = now
		next.V = versions{
			topicStats:   hashOf(next.Stats, next.Leader, next.LeaderEpoch, next.Queues),
			topicJobs:    hashOf(next.Stats.Jobs),
			topicCharts:  hashOf(next.Rollup),
			topicWorkers: hashOf(next.Stats.Workers),
		}
		r.last = next
	}
	close(r.fresh)
	r.fresh = make(chan struct{})
}

// nudge asks for a read soon because this process just changed jobs (a
// submit, a requeue): while someone watches a stream, the next read comes
// at once, or as soon as half an interval has passed since the last one,
// so that a job submitted here shows within a fraction of a second and
// reads stay at most two per interval.
func (r *refresher) nudge() {
	r.mu.Lock()
	watched := r.streams > 0 && !r.stopped
	r.mu.Unlock()
	if !watched {
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// invalidate marks the snapshot out of date because this process just
// changed what it shows (a queue paused from the console): the next
// page waits for a read begun after now, and the read comes at once.
// Only admin actions call it, so it cannot multiply the reads.
func (r *refresher) invalidate() {
	r.mu.Lock()
	r.staleBefore = r.now()
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// close stops the loop and wakes every stream so that it ends.
func (r *refresher) close() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	running := r.running
	close(r.stop)
	r.mu.Unlock()
	if running {
		<-r.done
	}
}

func (r *refresher) closing() <-chan struct{} { return r.stop }

// Limits of the event streams.
const (
	// maxStreams caps the open event streams of one process (each holds a
	// request of the submitter's MaxConcurrentRequests); more are refused
	// 503 and those pages poll.
	maxStreams = 128
	// streamLife ends a stream after a while: the browser opens the next
	// at once (Last-Event-ID carries its place), and the login is checked
	// again.
	streamLife = 5 * time.Minute
	// keepAlive is a comment sent when nothing changed, so proxies keep
	// the stream open.
	keepAlive = 20 * time.Second
	// writeTimeout bounds one write to a stream.
	writeTimeout = 10 * time.Second
	// authRecheck is how often a stream checks its login again.
	authRecheck = 5 * time.Second
)

// refreshChoices are the refresh periods a page may ask for, in seconds
// (0, "off", holds no stream).
var refreshChoices = map[string]time.Duration{"1": time.Second, "2": 2 * time.Second, "5": 5 * time.Second, "10": 10 * time.Second}

// live serves GET live?every=N&v=TOKEN: an event stream that sends, at
// most once every N seconds, one event per topic whose version differs
// from what the page has (TOKEN, or the Last-Event-ID of a reconnect),
// then a "v" event with the new token.
func (c *Console) live(w http.ResponseWriter, r *http.Request) {
	every, ok := refreshChoices[r.URL.Query().Get("every")]
	if !ok {
		c.fail(w, r, httpx.InvalidField("every", "must be one of 1, 2, 5, 10 (seconds)"))
		return
	}
	have, known := parseToken(r.URL.Query().Get("v"))
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		have, known = parseToken(id)
	}
	if c.streams.Add(1) > maxStreams {
		c.streams.Add(-1)
		w.Header().Set("Retry-After", "10")
		c.fail(w, r, httpx.Errorf(http.StatusServiceUnavailable, wire.CodeOverloaded, "too many live viewers; this page polls instead"))
		return
	}
	defer c.streams.Add(-1)
	if !c.snap.demand(true) {
		c.fail(w, r, httpx.Errorf(http.StatusServiceUnavailable, wire.CodeUnavailable, "the console is shutting down"))
		return
	}
	defer c.snap.release()

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(s string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.Write([]byte(s)); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send("retry: 2000\n\n") {
		return
	}
	ctx := r.Context()
	end := time.NewTimer(streamLife)
	defer end.Stop()
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	recheck := time.NewTicker(authRecheck)
	defer recheck.Stop()
	var sentAt time.Time
	var wait <-chan time.Time // set while a change waits for the period to pass
	for {
		snap, next := c.snap.latest()
		if !snap.At.IsZero() && wait == nil {
			if topics := snap.V.changed(have, known); len(topics) > 0 {
				if d := every - time.Since(sentAt); d > 0 {
					wait = time.After(d)
				} else {
					var b strings.Builder
					for _, t := range topics {
						fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", t, snap.V.token())
					}
					fmt.Fprintf(&b, "id: %s\nevent: v\ndata: %s\n\n", snap.V.token(), snap.V.token())
					if !send(b.String()) {
						return
					}
					have, known, sentAt = snap.V, true, time.Now()
					ping.Reset(keepAlive)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-c.snap.closing():
			return
		case <-end.C:
			return
		case <-next:
		case <-wait:
			wait = nil
		case <-ping.C:
			if !send(": \n\n") {
				return
			}
		case <-recheck.C:
			if !c.stillLoggedIn(r) {
				return
			}
		}
	}
}

// stillLoggedIn checks a stream's login again (a revoked key, an expired
// JWT), as every request does.
func (c *Console) stillLoggedIn(r *http.Request) bool {
	if c.cfg.Authn == nil {
		return true
	}
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	_, err = c.cfg.Authn.Verify(ctx, "Bearer "+ck.Value)
	return err == nil
}

// pollAnswer is GET live/poll's answer.
type pollAnswer struct {
	V       string   `json:"v"`
	Changed []string `json:"changed"`
}

// poll serves GET live/poll?v=TOKEN, the fallback of a page that cannot
// hold a stream: the topics changed since TOKEN, from the snapshot.
func (c *Console) poll(w http.ResponseWriter, r *http.Request) {
	have, known := parseToken(r.URL.Query().Get("v"))
	snap, err := c.snap.get(r.Context())
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := pollAnswer{V: snap.V.token(), Changed: snap.V.changed(have, known)}
	if out.Changed == nil {
		out.Changed = []string{}
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// liveInfo is what a page with live fragments tells live.js.
type liveInfo struct {
	URL string // the event stream, relative to the page
	V   string // the token of the snapshot the page was rendered with
}

func (c *Console) liveFor(r *http.Request, snap overview) *liveInfo {
	return &liveInfo{URL: rootOf(r) + "live", V: snap.V.token()}
}

// sharedLists holds the first pages of the Jobs lists that live refreshes
// re-fetch, one per search and jobs version: the viewers of one search
// share one query per change.
type sharedLists struct {
	mu      sync.Mutex
	entries map[ListParams]sharedList
}

type sharedList struct {
	v    uint32
	resp wire.JobListResponse
}

// maxSharedLists bounds the searches held; past it the cache starts over.
const maxSharedLists = 256

// list runs the Jobs list of p, or, for a live refresh (live=1 in the
// URL), takes it from the shared lists when it was read at the current
// jobs version.
func (c *Console) list(r *http.Request, p ListParams) (wire.JobListResponse, error) {
	if r.URL.Query().Get("live") != "1" {
		return c.svc.JobList(r.Context(), p)
	}
	snap, err := c.snap.get(r.Context())
	if err != nil {
		return wire.JobListResponse{}, err
	}
	v := snap.V[topicJobs]
	c.lists.mu.Lock()
	defer c.lists.mu.Unlock() // one read per search at a time: the others wait for it
	if e, ok := c.lists.entries[p]; ok && e.v == v {
		return e.resp, nil
	}
	resp, err := c.svc.JobList(r.Context(), p)
	if err != nil {
		return resp, err
	}
	if c.lists.entries == nil || len(c.lists.entries) >= maxSharedLists {
		c.lists.entries = map[ListParams]sharedList{}
	}
	c.lists.entries[p] = sharedList{v: v, resp: resp}
	return resp, nil
}
