package ui

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/wire"
)

// The Queues page: each queue's counts as GET /queues reports them, read
// from the refresher's snapshot (so the page costs no store query of its
// own and refreshes live on the stats topic), and for admin a Pause or
// Resume form per queue, which goes through the same service call, audit
// row included, as POST /queues/{name}/pause|resume.

// QueueService is what the Queues page changes, implemented by the
// submitter's service as the API's routes call it.
type QueueService interface {
	// QueueSetPaused pauses or resumes a queue (audited with the
	// principal of ctx).
	QueueSetPaused(ctx context.Context, name string, paused bool) (wire.QueueInfo, error)
}

func (c *Console) queueRoutes(r chi.Router) {
	r.Get("/queues", c.queues)
	r.Post("/queues/{name}/{act:pause|resume}", c.queuePause)
}

type queuesData struct {
	Queues []queuePageRow
}

type queuePageRow struct {
	wire.QueueInfo
	Link        string // its jobs
	PathName    string // Name escaped for a path segment
	FailureRate string // failed / (completed + failed) in the last minute; "—" when none finished
}

// failureRate is the share of a queue's jobs finished in the last minute
// that failed, as "12.5 %".
func failureRate(q wire.QueueInfo) string {
	n := q.CompletedPerMinute + q.FailedPerMinute
	if n == 0 {
		return "—"
	}
	tenths := (q.FailedPerMinute*1000 + n/2) / n
	return strconv.FormatInt(tenths/10, 10) + "." + strconv.FormatInt(tenths%10, 10) + " %"
}

func (c *Console) queues(w http.ResponseWriter, r *http.Request) {
	snap, err := c.snap.get(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := queuesData{}
	for _, q := range snap.Queues {
		d.Queues = append(d.Queues, queuePageRow{QueueInfo: q, PathName: url.PathEscape(q.Name), FailureRate: failureRate(q),
			Link: rootOf(r) + "jobs?q=" + url.QueryEscape("queue:"+q.Name)})
	}
	flash := ""
	switch r.URL.Query().Get("done") {
	case "pause":
		flash = "Queue paused: the coordinator leases none of its jobs from its next poll on; running ones finish."
	case "resume":
		flash = "Queue resumed: its due jobs are leased again from the coordinator's next poll."
	}
	c.render(w, r, http.StatusOK, "queues", Page{Title: "Queues", Nav: "queues", Flash: flash, Live: c.liveFor(r, snap), Data: d})
}

// queuePause handles POST queues/{name}/pause and .../resume (admin).
func (c *Console) queuePause(w http.ResponseWriter, r *http.Request) {
	if !c.adminForm(w, r) {
		return
	}
	act := chi.URLParam(r, "act")
	if _, err := c.svc.QueueSetPaused(r.Context(), pathParam(r, "name"), act == "pause"); err != nil {
		c.fail(w, r, err)
		return
	}
	c.snap.invalidate() // the page it goes back to shows the change
	redirect(w, rootOf(r)+"queues?done="+act)
}

// pathParam is a route parameter, unescaped when the path had escapes.
func pathParam(r *http.Request, name string) string {
	v := chi.URLParam(r, name)
	if r.URL.RawPath != "" && strings.Contains(v, "%") {
		if s, err := url.PathUnescape(v); err == nil {
			return s
		}
	}
	return v
}
