package ui

import (
	"bytes"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/httpx"
)

// Charts (docs/ui.md, "Charts"): the Overview's pictures of the last hour,
// drawn here as inline SVG from the per-minute rollup the leader
// coordinator writes (store.RollupWrite), which the refresher reads with
// the counts. No chart needs Prometheus, Grafana or a script; every number
// in the SVG is computed here, and text goes through the template's
// escaping like any other.

// Geometry of one chart, in SVG user units.
const (
	chartW, chartH             = 600.0, 170.0
	padL, padR, padT, padB     = 52.0, 24.0, 10.0, 22.0
	plotW, plotH               = chartW - padL - padR, chartH - padT - padB
	chartMinutes               = int(chartWindow / time.Minute)
	maxChartNames              = 100
	grafanaDashboard           = "/d/dts-overview/dts"
	panelThroughput, panelWait = 107, 102
	panelDepth, panelQueue     = 4, 3
)

type chartsData struct {
	Name   string   // the job name shown; "" for every name
	Names  []string // the names with rows in the window
	URL    string   // what a live refresh re-fetches
	Action string   // the name picker's form action
	Charts []chart
}

type chart struct {
	ID, Title string
	Desc      string // the chart in words, for screen readers
	Grafana   string // the matching Grafana panel; "" without GRAFANA_URL
	Series    []series
	YTicks    []tick
	XTicks    []tick
	Empty     bool
	// Geometry for the template.
	Left, Right, Top, Bottom float64
}

type series struct {
	Label, Class string
	Lines        []string // polyline points, one line per run of minutes with data
	Last         string   // the newest value, as shown in the legend
}

type tick struct {
	Pos   float64
	Label string
}

// chartName reads the Overview's ?name= (a job name, or "" for all).
func chartName(r *http.Request) (string, error) {
	name := r.URL.Query().Get("name")
	if len(name) > 128 {
		return "", httpx.InvalidField("name", "a job name has at most 128 bytes")
	}
	return name, nil
}

// chartsFor builds the charts of name from the snapshot's rollup.
func (c *Console) chartsFor(r *http.Request, snap overview, name string) chartsData {
	end := snap.At.Truncate(time.Minute) // the current minute is not written yet
	start := end.Add(-chartWindow)
	byMinute := make([]*RollupRow, chartMinutes)
	seen := map[string]int64{}
	for i := range snap.Rollup {
		row := &snap.Rollup[i]
		if row.Minute.Before(start) || !row.Minute.Before(end) {
			continue
		}
		if row.Name != "" {
			seen[row.Name] += row.Completed + row.Failed + row.Started + row.QueueDepth
		}
		if row.Name == name {
			byMinute[int(row.Minute.Sub(start)/time.Minute)] = row
		}
	}
	d := chartsData{Name: name, Action: rootOf(r), URL: rootOf(r) + "charts?name=" + url.QueryEscape(name)}
	for n := range seen {
		d.Names = append(d.Names, n)
	}
	slices.SortFunc(d.Names, func(a, b string) int {
		if seen[a] != seen[b] {
			return int(seen[b] - seen[a])
		}
		return strings.Compare(a, b)
	})
	d.Names = d.Names[:min(len(d.Names), maxChartNames)]
	slices.Sort(d.Names)

	val := func(f func(*RollupRow) (float64, bool)) []*float64 {
		out := make([]*float64, chartMinutes)
		for i, row := range byMinute {
			if row != nil {
				if v, ok := f(row); ok {
					out[i] = &v
				}
			}
		}
		return out
	}
	count := func(f func(*RollupRow) int64) []*float64 {
		return val(func(r *RollupRow) (float64, bool) { return float64(f(r)), true })
	}
	ptr := func(f func(*RollupRow) *float64) []*float64 {
		return val(func(r *RollupRow) (float64, bool) {
			if p := f(r); p != nil {
				return *p, true
			}
			return 0, false
		})
	}
	type in struct {
		label, class string
		vals         []*float64
	}
	mk := func(id, title, unit string, panel int, ins ...in) chart {
		ch := chart{ID: id, Title: title, Grafana: c.grafana(panel), Left: padL, Right: chartW - padR, Top: padT, Bottom: chartH - padB}
		top := 0.0
		for _, s := range ins {
			for _, v := range s.vals {
				if v != nil {
					top = max(top, *v)
				}
			}
		}
		top = niceCeil(top)
		ch.Empty = true
		var words []string
		for _, s := range ins {
			se := series{Label: s.label, Class: s.class, Last: "none"}
			var run []string
			flush := func() {
				if len(run) == 1 { // one point: a short stroke, so that it shows
					x, y, _ := strings.Cut(run[0], ",")
					xf, _ := strconv.ParseFloat(x, 64)
					run = append(run, num(xf+3)+","+y)
				}
				if len(run) > 0 {
					se.Lines = append(se.Lines, strings.Join(run, " "))
				}
				run = nil
			}
			most := 0.0
			for i, v := range s.vals {
				if v == nil {
					flush()
					continue
				}
				ch.Empty = false
				x := padL + plotW*float64(i)/float64(chartMinutes-1)
				y := padT + plotH*(1-*v/top)
				run = append(run, num(x)+","+num(y))
				se.Last = label(*v) + unit
				most = max(most, *v)
			}
			flush()
			ch.Series = append(ch.Series, se)
			words = append(words, s.label+": newest "+se.Last+", highest "+label(most)+unit)
		}
		ch.Desc = title + ", per minute over the last hour. " + strings.Join(words, "; ") + "."
		for _, f := range []float64{0, 0.5, 1} {
			ch.YTicks = append(ch.YTicks, tick{Pos: padT + plotH*(1-f), Label: label(top*f) + unit})
		}
		for _, i := range []int{0, 15, 30, 45, chartMinutes - 1} {
			ch.XTicks = append(ch.XTicks, tick{Pos: padL + plotW*float64(i)/float64(chartMinutes-1),
				Label: start.Add(time.Duration(i) * time.Minute).UTC().Format("15:04")})
		}
		return ch
	}
	d.Charts = []chart{
		mk("throughput", "Completed and failed per minute", "", panelThroughput,
			in{"completed", "s-ok", count(func(r *RollupRow) int64 { return r.Completed })},
			in{"failed", "s-bad", count(func(r *RollupRow) int64 { return r.Failed })}),
		mk("depth", "Queue depth (due jobs)", "", panelDepth,
			in{"due", "s-a", count(func(r *RollupRow) int64 { return r.QueueDepth })}),
		mk("oldest", "Oldest pending age", " s", panelQueue,
			in{"oldest", "s-b", val(func(r *RollupRow) (float64, bool) { return r.OldestPending, true })}),
		mk("wait", "Submit to start", " ms", panelWait,
			in{"p50", "s-a", ptr(func(r *RollupRow) *float64 { return r.StartP50 })},
			in{"p95", "s-b", ptr(func(r *RollupRow) *float64 { return r.StartP95 })}),
	}
	return d
}

// grafana links to a panel of the provisioned dashboard, over the last
// hour, when GRAFANA_URL is set.
func (c *Console) grafana(panel int) string {
	if c.cfg.GrafanaURL == "" {
		return ""
	}
	q := url.Values{"viewPanel": {strconv.Itoa(panel)}, "from": {"now-1h"}, "to": {"now"}}
	return strings.TrimSuffix(c.cfg.GrafanaURL, "/") + grafanaDashboard + "?" + q.Encode()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 at least).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// label writes a value as a chart shows it: whole above 10, one decimal
// below, k and M for large ones.
func label(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 0, 64) + "k"
	case v >= 10 || v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

// charts serves GET charts?name=, the charts fragment a live refresh
// re-fetches.
func (c *Console) charts(w http.ResponseWriter, r *http.Request) {
	name, err := chartName(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	snap, err := c.snap.get(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	var buf bytes.Buffer
	if err := c.pages["overview"].ExecuteTemplate(&buf, "charts", c.chartsFor(r, snap, name)); err != nil {
		c.cfg.Logger.ErrorContext(r.Context(), "render charts", "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}
