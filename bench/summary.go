package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Summary puts the headline figures of several runs of the same command
// side by side with their medians: runs on a shared two-core machine swing
// by ±15–30%, so one run says little.
type Summary struct {
	Runs    int             `json:"runs"`
	Figures []SummaryFigure `json:"figures"`
}

// SummaryFigure is one figure of every run that measured it.
type SummaryFigure struct {
	Scenario string `json:"scenario"`
	Metric   string `json:"metric"`
	// Values has one entry per run, null where that run lacks the figure.
	Values []*float64 `json:"values"`
	Median float64    `json:"median"`
	// Goal and MedianMet are set for the performance issue's targets.
	Goal      string `json:"goal,omitempty"`
	MedianMet *bool  `json:"median_met,omitempty"`
}

// figure is one headline figure of a single report.
type figure struct {
	scenario, metric string
	value            float64
}

// headline lists a report's figures worth comparing between runs, in the
// order the report prints them.
func headline(r *Report) []figure {
	var out []figure
	add := func(s, m string, v float64) { out = append(out, figure{s, m, v}) }
	if d := r.Drain; d != nil && d.Rate > 0 {
		add(ScenarioDrain, "drain rate (jobs/s)", d.Rate)
		add(ScenarioDrain, "pre-submit rate (jobs/s)", d.SubmitRate)
		if rss := peakRSS(d.Resources, "coordinator"); rss > 0 {
			add(ScenarioDrain, "coordinator peak RSS (MB)", rss)
		}
	}
	// With payloads the memory of every process is a headline figure.
	peaks := func(scenario string, u Usage) {
		if r.Settings.PayloadBytes == 0 {
			return
		}
		for _, p := range u.Procs {
			if p.PeakRSSMB == 0 || scenario == ScenarioDrain && p.Name == "coordinator" { // the drain's is one already
				continue
			}
			add(scenario, p.Name+" peak RSS (MB)", p.PeakRSSMB)
		}
	}
	if d := r.Drain; d != nil && d.Rate > 0 {
		peaks(ScenarioDrain, d.Resources)
	}
	if s := r.Sustained; s != nil {
		add(ScenarioSustained, "completed rate (jobs/s)", s.CompletedRate)
		add(ScenarioSustained, "submitted rate (jobs/s)", s.SubmitRate)
		add(ScenarioSustained, "backlog at window end (jobs)", float64(s.BacklogEnd))
		peaks(ScenarioSustained, s.Resources)
	}
	for _, l := range r.Latency {
		add(ScenarioLatency, fmt.Sprintf("p50 submit->start at %s (ms)", l.Label), l.SubmitToStart.P50)
		add(ScenarioLatency, fmt.Sprintf("p99 submit->start at %s (ms)", l.Label), l.SubmitToStart.P99)
		add(ScenarioLatency, fmt.Sprintf("p99 submit->finish at %s (ms)", l.Label), l.SubmitToFinish.P99)
	}
	if rc := r.Recovery; rc != nil && rc.Relet.N > 0 {
		add(ScenarioRecovery, "max kill->re-leased (s)", rc.Relet.Max/1000)
	}
	return out
}

// Summarize collects the headline figures and targets of reports (in run
// order) with their medians. A figure some runs lack (a failed scenario, a
// latency run at half of a different maximum) is summarised over the runs
// that have it.
func Summarize(reports []*Report) Summary {
	sum := Summary{Runs: len(reports)}
	index := map[string]int{}
	put := func(run int, scenario, metric string, v float64) *SummaryFigure {
		key := scenario + "\x00" + metric
		i, ok := index[key]
		if !ok {
			i = len(sum.Figures)
			index[key] = i
			sum.Figures = append(sum.Figures, SummaryFigure{Scenario: scenario, Metric: metric,
				Values: make([]*float64, len(reports))})
		}
		f := &sum.Figures[i]
		f.Values[run] = &v
		return f
	}
	for run, r := range reports {
		if r == nil {
			continue
		}
		for _, f := range headline(r) {
			put(run, f.scenario, f.metric, f.value)
		}
		for _, t := range r.Targets {
			put(run, t.Scenario, t.Metric, t.Value).Goal = t.Goal // the same figure as headline's, if listed there
		}
	}
	for i := range sum.Figures {
		f := &sum.Figures[i]
		var vs []float64
		for _, v := range f.Values {
			if v != nil {
				vs = append(vs, *v)
			}
		}
		f.Median = median(vs)
		if f.Goal != "" {
			met := meets(f.Median, f.Goal)
			f.MedianMet = &met
		}
	}
	return sum
}

// median of values (the mean of the middle two for an even count).
func median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// meets reports whether v satisfies a goal written as targets writes them:
// ">= X", "<= X" or "< X".
func meets(v float64, goal string) bool {
	var op string
	var x float64
	if _, err := fmt.Sscanf(goal, "%s %g", &op, &x); err != nil {
		return false
	}
	switch op {
	case ">=":
		return v >= x
	case "<=":
		return v <= x
	case "<":
		return v < x
	}
	return false
}

// WriteTable prints the summary: one row per figure, one column per run.
func (s Summary) WriteTable(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "SUMMARY of %d runs (medians; every run is printed above)\n", s.Runs)
	head := []string{"  scenario", "metric"}
	for i := range s.Runs {
		head = append(head, fmt.Sprintf("run %d", i+1))
	}
	head = append(head, "median", "goal", "median met")
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, f := range s.Figures {
		row := []string{"  " + f.Scenario, f.Metric}
		for _, v := range f.Values {
			if v != nil {
				row = append(row, num(*v))
			} else {
				row = append(row, "-")
			}
		}
		met := ""
		if f.MedianMet != nil {
			met = "no"
			if *f.MedianMet {
				met = "yes"
			}
		}
		row = append(row, num(f.Median), f.Goal, met)
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
	return w.Flush()
}
