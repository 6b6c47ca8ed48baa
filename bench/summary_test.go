package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummarizeMedians(t *testing.T) {
	lat := func(p50, p99 float64) []LatencyRun {
		return []LatencyRun{{Label: "1000/s", TargetRate: 1000,
			SubmitToStart: Percentiles{N: 1, P50: p50, P99: p99}, SubmitToFinish: Percentiles{N: 1, P99: 2 * p99}}}
	}
	reports := []*Report{
		{Drain: &DrainResult{Rate: 30000, SubmitRate: 100000}, Latency: lat(2, 12)},
		{Drain: &DrainResult{Rate: 26000, SubmitRate: 90000}, Latency: lat(3, 8)},
		{Latency: lat(2.5, 9)}, // its drain failed
	}
	for _, r := range reports {
		r.Targets = targets(r)
	}
	s := Summarize(reports)
	if s.Runs != 3 {
		t.Fatalf("Runs = %d", s.Runs)
	}
	byMetric := map[string]SummaryFigure{}
	for _, f := range s.Figures {
		byMetric[f.Scenario+" "+f.Metric] = f
	}
	check := func(key string, median float64, present []bool) SummaryFigure {
		t.Helper()
		f, ok := byMetric[key]
		if !ok {
			t.Fatalf("no figure %q in %+v", key, s.Figures)
		}
		if f.Median != median {
			t.Errorf("%s: median %g, want %g", key, f.Median, median)
		}
		for i, p := range present {
			if (f.Values[i] != nil) != p {
				t.Errorf("%s: run %d present = %v, want %v", key, i+1, f.Values[i] != nil, p)
			}
		}
		return f
	}
	if n := len(s.Figures); n != 5 {
		t.Errorf("%d figures, want 5 (a target shares its row with the same figure): %+v", n, s.Figures)
	}
	if f := check("latency p99 submit->start at 1000/s (ms)", 9, []bool{true, true, true}); f.MedianMet == nil || !*f.MedianMet {
		t.Errorf("p99 median 9 ms against <= 10: met = %v", f.MedianMet)
	}
	if f := check("drain drain rate (jobs/s)", 28000, []bool{true, true, false}); f.MedianMet == nil || !*f.MedianMet {
		t.Errorf("drain median 28000 against >= 25000: met = %v", f.MedianMet)
	}

	var b bytes.Buffer
	if err := s.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SUMMARY of 3 runs", "run 3", "28,000", "-"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestMedianAndMeets(t *testing.T) {
	if m := median([]float64{5, 1, 3}); m != 3 {
		t.Errorf("median odd = %g", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median even = %g", m)
	}
	for _, c := range []struct {
		v    float64
		goal string
		want bool
	}{{25000, ">= 25000", true}, {24999, ">= 25000", false}, {10, "<= 10", true}, {10.1, "<= 10", false},
		{4.9, "< 5", true}, {5, "< 5", false}, {1, "bogus", false}} {
		if got := meets(c.v, c.goal); got != c.want {
			t.Errorf("meets(%g, %q) = %v", c.v, c.goal, got)
		}
	}
}

// TestSummarizePayloadMemory: with payloads every process's peak RSS is a
// headline figure; without, only the coordinator's drain figure is.
func TestSummarizePayloadMemory(t *testing.T) {
	use := Usage{Procs: []ResourceUse{{Name: "submitter", PeakRSSMB: 700}, {Name: "coordinator", PeakRSSMB: 200},
		{Name: "postgres", Processes: 12}}}
	rep := func(payload int) *Report {
		return &Report{Settings: Settings{PayloadBytes: payload},
			Drain: &DrainResult{Rate: 10, Resources: use}, Sustained: &SustainedResult{CompletedRate: 10, Resources: use}}
	}
	metrics := func(s Summary) []string {
		var out []string
		for _, f := range s.Figures {
			if strings.Contains(f.Metric, "RSS") {
				out = append(out, f.Scenario+" "+f.Metric)
			}
		}
		return out
	}
	want := []string{"drain coordinator peak RSS (MB)", "drain submitter peak RSS (MB)",
		"sustained submitter peak RSS (MB)", "sustained coordinator peak RSS (MB)"}
	if got := metrics(Summarize([]*Report{rep(1 << 20)})); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("with payloads, memory figures %q, want %q", got, want)
	}
	if got := metrics(Summarize([]*Report{rep(0)})); len(got) != 1 {
		t.Errorf("without payloads, memory figures %q, want the coordinator's drain figure only", got)
	}
}
