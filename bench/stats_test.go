package bench

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	t.Parallel()
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100-i) / 1000 // 0.100 … 0.001 s, unsorted
	}
	tests := []struct {
		name string
		in   []float64
		want Percentiles
	}{
		{"empty", nil, Percentiles{}},
		{"one", []float64{0.002}, Percentiles{N: 1, Mean: 2, Min: 2, P50: 2, P95: 2, P99: 2, Max: 2}},
		{"two", []float64{0.003, 0.001}, Percentiles{N: 2, Mean: 2, Min: 1, P50: 1, P95: 3, P99: 3, Max: 3}},
		{"hundred", hundred, Percentiles{N: 100, Mean: 50.5, Min: 1, P50: 50, P95: 95, P99: 99, Max: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := percentiles(tt.in)
			if !near(got, tt.want) {
				t.Errorf("percentiles = %+v, want %+v", got, tt.want)
			}
		})
	}
	if hundred[0] != 0.1 {
		t.Error("percentiles sorted its input")
	}
}

func near(a, b Percentiles) bool {
	eq := func(x, y float64) bool { return x-y < 1e-9 && y-x < 1e-9 }
	return a.N == b.N && eq(a.Mean, b.Mean) && eq(a.Min, b.Min) && eq(a.P50, b.P50) && eq(a.P95, b.P95) &&
		eq(a.P99, b.P99) && eq(a.Max, b.Max)
}

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	m := parseMetrics(`# HELP dts_claim_batch_size x
# TYPE dts_claim_batch_size histogram
dts_claim_batch_size_bucket{le="1"} 2
dts_claim_batch_size_sum 1500
dts_claim_batch_size_count 3
dts_queue_wait_seconds_sum{type="noop"} 1.5
dts_queue_wait_seconds_sum{type="sleep"} 0.5
dts_queue_wait_seconds_count{type="noop"} 3
dts_queue_wait_seconds_count{type="sleep"} 1 1700000000000
`)
	if m["dts_claim_batch_size_sum"] != 1500 || m["dts_claim_batch_size_bucket"] != 2 {
		t.Errorf("parsed %v", m)
	}
	if got, n := mean(metrics{}, m, "dts_queue_wait_seconds"); got != 0.5 || n != 4 {
		t.Errorf("mean = %v over %v, want 0.5 over 4", got, n)
	}
	if got, n := mean(m, m, "dts_queue_wait_seconds"); got != 0 || n != 0 {
		t.Errorf("mean over no samples = %v, %v", got, n)
	}
}

func TestBatchBody(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 1000} {
		var jobs []map[string]any
		if err := json.Unmarshal(batchBody(noopJob, n), &jobs); err != nil || len(jobs) != n || jobs[n-1]["name"] != "noop" {
			t.Errorf("batchBody(%d): %d jobs, %v", n, len(jobs), err)
		}
	}
}

func TestNum(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]string{0: "0", 49.5: "49.50", 999: "999", 1000: "1,000", 25000.4: "25,000", 1234567: "1,234,567"} {
		if got := num(in); got != want {
			t.Errorf("num(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{DatabaseURL: "postgres://x", RedisURL: "redis://x"}
	tests := []struct {
		name  string
		edit  func(*Config)
		field string // "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"quick", func(c *Config) { *c = Quick(*c) }, ""},
		{"no database", func(c *Config) { c.DatabaseURL = "" }, "DatabaseURL"},
		{"no redis", func(c *Config) { c.RedisURL = "" }, "RedisURL"},
		{"batch too big", func(c *Config) { c.BatchSize = 1001 }, "BatchSize"},
		{"unknown scenario", func(c *Config) { c.Scenarios = []string{"drain", "soak"} }, "Scenarios"},
		{"bad rate", func(c *Config) { c.LatencyRates = []float64{-1} }, "LatencyRates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.WithDefaults().validate()
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("validate: %v", err)
			case tt.field != "" && (err == nil || !strings.Contains(err.Error(), tt.field)):
				t.Errorf("validate = %v, want an error naming %s", err, tt.field)
			}
		})
	}
	if d := ok.WithDefaults(); d.RecoveryConcurrency != d.Concurrency || d.DrainJobs != 200_000 || d.SustainedDuration != time.Minute {
		t.Errorf("defaults: %+v", d)
	}
}

func TestReadProc(t *testing.T) {
	t.Parallel()
	r, err := readProc(os.Getpid())
	if err != nil {
		t.Fatalf("read /proc of this process: %v", err)
	}
	if r.rssKB <= 0 || r.cpuTicks < 0 {
		t.Errorf("readProc(self) = %+v", r)
	}
	if clockTicks() <= 0 {
		t.Errorf("clockTicks = %d", clockTicks())
	}
	s := newSampler(10 * time.Millisecond)
	s.add("self", os.Getpid(), false)
	s.start()
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); { // burn a little CPU
	}
	u := s.stop(1000)
	if len(u.Procs) != 1 || u.Procs[0].PeakRSSMB <= 0 || u.Procs[0].CPUSeconds < 0 || u.Seconds <= 0 {
		t.Errorf("sampler: %+v", u)
	}
}

func TestPollEvery(t *testing.T) {
	t.Parallel()
	const i = 250 * time.Millisecond
	for backlog, want := range map[int64]time.Duration{0: i, 49_999: i, 200_000: time.Second, 1_000_000: 5 * time.Second, 5_000_000: 5 * time.Second} {
		if got := pollEvery(i, backlog); got != want {
			t.Errorf("pollEvery(%v, %d) = %v, want %v", i, backlog, got, want)
		}
	}
}
