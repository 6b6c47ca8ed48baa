package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the report as aligned tables.
func (r *Report) WriteTable(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	m, pg, rd, st := r.Machine, r.Postgres, r.Redis, r.Settings
	p("dts bench, %s (%.0f s)", r.StartedAt.Format("2006-01-02 15:04:05 MST"), r.Seconds)
	if r.Command != "" {
		p("command\t%s", r.Command)
	}
	p("machine\t%d CPUs, %s, %d MB RAM, Linux %s, %s", m.CPUs, m.CPUModel, m.MemoryMB, m.Kernel, m.GoVersion)
	if m.LoadAvg != "" {
		p("load average\t%s at the start, %s at the end (other programs on the machine skew every figure)", m.LoadAvg, m.LoadAvgEnd)
	}
	if pg.Version != "" {
		p("postgres\t%s, fsync=%s synchronous_commit=%s full_page_writes=%s shared_buffers=%s", pg.Version, pg.Fsync,
			pg.SynchronousCommit, pg.FullPageWrites, pg.SharedBuffers)
	}
	if rd.Version != "" {
		p("redis\t%s, aof=%t appendfsync=%s", rd.Version, rd.AOF, rd.AppendFsync)
	}
	p("cluster\t1 submitter, 1 coordinator, %d workers x %d slots; %d submit clients x %d-job batches; %s",
		st.Workers, st.Concurrency, st.SubmitClients, st.BatchSize, st.ServiceDefaults)
	if len(st.ServiceEnv) > 0 || st.SubmitterDBParams != "" {
		p("EXPERIMENT\tservices run with %s %s (not their defaults)", strings.Join(st.ServiceEnv, " "), st.SubmitterDBParams)
	}
	if shape := st.shape(); shape != "" {
		p("SHAPE\t%s (not the standard noop run)", shape)
	}
	if st.Profiled {
		p("PROFILED\tthe sustained window's figures include the cost of CPU profiling every process")
	}

	if l := r.Link; l != nil {
		p("")
		p("LINK: toxiproxy between the services and the stores, %g ms each way (the bench's own PostgreSQL reads go direct)", l.LatencyMS)
		p("  round trip through the proxy\tPostgreSQL %.2f ms\tRedis %.2f ms", l.PostgresRoundTripMS, l.RedisRoundTripMS)
		toxics := "none"
		if len(l.Toxics) > 0 {
			toxics = strings.Join(l.Toxics, ", ")
		}
		p("  toxics\t%s", toxics)
	}
	if l := r.Limits; l != nil {
		p("")
		p("LIMIT KEYS: %s keys, each with a limit of 1 start a day, one job completed and one left waiting", num(float64(l.Keys)))
		p("  set up in\t%.1f s\t%s of their jobs still waiting at the end (left out of every count below)", l.Seconds, num(float64(l.WaitingEnd)))
	}
	if d := r.Drain; d != nil {
		p("")
		p("DRAIN: %s noop jobs submitted with no worker running, then drained", num(float64(d.Jobs)))
		p("  pre-submit (POST /submit_jobs)\t%.2f s\t%s jobs/s", d.SubmitSeconds, num(d.SubmitRate))
		if d.Rate > 0 {
			p("  drain (workers start -> last finished_at)\t%.2f s\t%s jobs/s", d.Seconds, num(d.Rate))
			p("  first finished_at after workers start\t%.2f s\tsteady %s jobs/s", d.FirstFinishSeconds, num(d.SteadyRate))
			p("  coordinator mean batch\tclaim %.0f\tresults %.0f", d.MeanClaimBatch, d.MeanResultBatch)
		}
		w.Flush()
		writeUsage(out, "resources during the pre-submit", d.Submit, m.CPUs)
		writeUsage(out, "resources during the drain", d.Resources, m.CPUs)
	}
	if s := r.Sustained; s != nil {
		p("")
		pace := "back to back, unbounded (a flood)"
		if s.BacklogBound > 0 {
			pace = "while fewer than " + num(float64(s.BacklogBound)) + " jobs are unfinished"
		}
		if s.OfferedRate > 0 {
			pace += ", paced to " + num(s.OfferedRate) + " jobs/s"
		}
		p("SUSTAINED: %d clients posting %d-job batches %s; %.0f s window after %.0f s warm-up",
			st.SubmitClients, st.BatchSize, pace, s.Seconds, s.WarmupSeconds)
		p("  completed in window\t%s\t%s jobs/s", num(float64(s.Completed)), num(s.CompletedRate))
		p("  submitted in window\t%s\t%s jobs/s\t(%d submit errors, %d batches refused 503 backlog_full)", num(float64(s.Submitted)), num(s.SubmitRate), s.SubmitErrors, s.Refused)
		p("  backlog at window start / end\t%s / %s", num(float64(s.BacklogStart)), num(float64(s.BacklogEnd)))
		if s.BacklogClearRate > 0 {
			p("  backlog then cleared in\t%.1f s\t%s jobs/s", s.BacklogClearSeconds, num(s.BacklogClearRate))
		}
		w.Flush()
		writeUsage(out, "resources during the window", s.Resources, m.CPUs)
		if s.BacklogClearRate > 0 {
			writeUsage(out, "resources while the backlog cleared", s.BacklogResources, m.CPUs)
		}
	}
	if len(r.Latency) > 0 {
		p("")
		p("LATENCY: single jobs via POST /submit_job at a fixed rate (open loop); ms; delays from PostgreSQL timestamps")
		p("  offered\tachieved/s\tjobs\tlate\terrors\tsubmit->start p50 / p95 / p99 / max\tsubmit->finish p50 / p95 / p99 / max\thttp p50 / p99\tmetrics mean wait / e2e\tmean claim / deliver")
		for _, l := range r.Latency {
			p("  %s\t%s\t%d\t%d\t%d\t%s\t%s\t%.1f / %.1f\t%.1f / %.1f\t%.2f / %.2f", l.Label, num(l.AchievedRate), l.Submitted, l.Late, l.Errors,
				pct(l.SubmitToStart), pct(l.SubmitToFinish), l.HTTP.P50, l.HTTP.P99, l.MetricsQueueWaitMs, l.MetricsEndToEndMs,
				l.MetricsClaimMs, l.MetricsDeliverMs)
		}
		w.Flush()
		for _, l := range r.Latency {
			writeUsage(out, "resources at "+l.Label, l.Resources, m.CPUs)
		}
	}
	if rc := r.Recovery; rc != nil {
		p("")
		p("RECOVERY: %d workers x %d slots full of %g s sleep jobs; SIGKILL the one holding most; default heartbeat 1 s x 3, lease 10 s",
			rc.Workers, rc.Concurrency, rc.SleepSeconds)
		p("  killed\t%s holding %d jobs; %d leased again elsewhere", rc.KilledWorker, rc.JobsOnKilled, rc.Recovered)
		p("  kill -> leased again (s)\tmin %.2f\tp50 %.2f\tmax %.2f", minOf(rc.Relet), rc.Relet.P50/1000, rc.Relet.Max/1000)
		p("  recorded reason of the killed attempts\t%s", fmtMap(rc.Reasons))
		p("  attempts, killed worker's jobs\t%s", fmtIntMap(rc.AttemptsKilled))
		p("  attempts, all jobs\t%s\tfinal status %s\t(all finished %.1f s after the kill)", fmtIntMap(rc.AttemptsAll), fmtMap(rc.FinalStatus), rc.FinishedSeconds)
	}
	if len(r.Groups) > 0 {
		p("")
		lo, hi, others, unserved := r.Groups[0].Completed, r.Groups[0].Completed, int64(0), 0
		for _, g := range r.Groups {
			lo, hi, others = min(lo, g.Completed), max(hi, g.Completed), others+g.ByOthers
			if g.Completed == 0 {
				unserved++
			}
		}
		p("GROUPS: %d groups of workers, each handling only its own job name; completed jobs by group (JSON: groups)", len(r.Groups))
		p("  completed per group\tmin %s\tmax %s\t%d groups with none\t%s completed by a worker outside their group",
			num(float64(lo)), num(float64(hi)), unserved, num(float64(others)))
	}
	if len(r.Targets) > 0 {
		p("")
		p("TARGETS (from the performance issue)")
		p("  scenario\tmetric\tmeasured\tgoal\tmet")
		for _, t := range r.Targets {
			met := "no"
			if t.Met {
				met = "yes"
			}
			p("  %s\t%s\t%s\t%s\t%s", t.Scenario, t.Metric, num(t.Value), t.Goal, met)
		}
	}
	if r.Error != "" {
		p("")
		p("STOPPED EARLY: %s", firstLine(r.Error))
	}
	return w.Flush()
}

// shape describes the experiment flags of a run, "" for none.
func (st Settings) shape() string {
	var parts []string
	if st.PayloadBytes > 0 {
		s := fmt.Sprintf("drain and sustained jobs carry a %s-byte payload, %d to a batch", num(float64(st.PayloadBytes)), st.BatchSize)
		if len(st.SubmitterEnv) > 0 {
			s += ", submitter with " + strings.Join(st.SubmitterEnv, " ")
		}
		parts = append(parts, s)
	}
	if st.LeanFleet {
		parts = append(parts, "a lean simulated fleet: the workers share their process's connections and complete every job at once")
	}
	if st.JobGroups > 0 {
		parts = append(parts, fmt.Sprintf("a mixed fleet: %d groups of workers, each handling only its job name noop_g<g>, jobs spread evenly over the names", st.JobGroups))
	}
	if st.LimitKeys > 0 {
		parts = append(parts, fmt.Sprintf("%s concurrency-limit keys with a limited job waiting", num(float64(st.LimitKeys))))
	}
	switch {
	case st.LinkLatencyMS > 0:
		parts = append(parts, fmt.Sprintf("every service and worker reaches PostgreSQL and Redis through toxiproxy, %g ms latency each way", st.LinkLatencyMS))
	case st.LinkProxy:
		parts = append(parts, "every service and worker reaches PostgreSQL and Redis through toxiproxy, no latency added (the proxies' cost alone)")
	}
	return strings.Join(parts, "; ")
}

func writeUsage(out io.Writer, title string, u Usage, cpus int) {
	if len(u.Procs) == 0 {
		return
	}
	fmt.Fprintf(out, "  %s: %.1f s, machine %.0f%% busy over %d CPUs, %.1f CPU s not attributed to the processes below\n",
		title, u.Seconds, u.MachineBusyPercent, cpus, u.OtherCPUSeconds)
	fmt.Fprintf(out, "    %-22s %8s %8s %14s %12s\n", "process", "CPU s", "% core", "CPU s/100k jobs", "peak RSS MB")
	for _, r := range u.Procs {
		rss := "-"
		if r.PeakRSSMB > 0 {
			rss = fmt.Sprintf("%.0f", r.PeakRSSMB)
		}
		per := "-"
		if r.CPUPer100k > 0 {
			per = fmt.Sprintf("%.2f", r.CPUPer100k)
		}
		name := r.Name
		if r.Processes > 1 {
			name = fmt.Sprintf("%s (%d procs)", r.Name, r.Processes)
		}
		fmt.Fprintf(out, "    %-22s %8.2f %8.0f %14s %12s\n", name, r.CPUSeconds, r.CPUPercent, per, rss)
	}
}

func pct(p Percentiles) string {
	if p.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f / %.1f / %.1f / %.1f", p.P50, p.P95, p.P99, p.Max)
}

// minOf is the smallest value of a sample, in seconds.
func minOf(p Percentiles) float64 { return p.Min / 1000 }

// num formats v with thousands separators; one decimal below 100.
func num(v float64) string {
	if v < 100 && v != float64(int64(v)) {
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func fmtMap(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, m[k]))
	}
	return strings.Join(parts, " ")
}

func fmtIntMap(m map[int]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d:%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
