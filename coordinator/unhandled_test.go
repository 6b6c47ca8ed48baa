package coordinator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dtsched/dts/coordinator/internal/registry"
	"github.com/dtsched/dts/internal/store"
)

// TestStateCollectorUnhandled scrapes dts_jobs_unhandled from a real
// database: waiting jobs whose name no live worker handles, by name, and
// other at 0 while every waiting job has a worker.
func TestStateCollectorUnhandled(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(newStateCollector(r.store, func() *registry.Registry { return nil }, r.b.metrics))
	sync := func(rows ...store.WorkerRow) {
		t.Helper()
		if err := r.store.WorkerSync(r.ctx, r.b.l.epoch, rows); err != nil {
			t.Fatal(err)
		}
	}
	insert := func(names ...string) {
		t.Helper()
		ps := make([]store.JobInsertParams, len(names))
		for i, n := range names {
			ps[i] = store.JobInsertParams{Name: n}
		}
		if _, err := r.store.JobInsert(r.ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	compare := func(want string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "dts_jobs_unhandled"); err != nil {
			t.Error(err)
		}
	}
	sync(store.WorkerRow{ID: "w", JobTypes: []string{"email", "noop"}, State: "available", Concurrency: 1})
	insert("email", "noop")
	header := "# HELP dts_jobs_unhandled Pending and retrying jobs whose name no live (available or busy) worker handles, by name: the 20 largest, the rest as other.\n" +
		"# TYPE dts_jobs_unhandled gauge\n"
	compare(header + "dts_jobs_unhandled{name=\"other\"} 0\n")

	insert("emial", "emial", "sned")
	for i := range maxUnhandledSeries {
		insert(fmt.Sprintf("t%02d", i))
	}
	// emial 2, then 21 names of 1 job, by name: sned and t00..t17 fit; t18
	// and t19 are other.
	var want strings.Builder
	want.WriteString(header)
	want.WriteString("dts_jobs_unhandled{name=\"emial\"} 2\n")
	want.WriteString("dts_jobs_unhandled{name=\"other\"} 2\n")
	want.WriteString("dts_jobs_unhandled{name=\"sned\"} 1\n")
	for i := range maxUnhandledSeries - 2 {
		fmt.Fprintf(&want, "dts_jobs_unhandled{name=\"t%02d\"} 1\n", i)
	}
	compare(want.String())
}

// TestStateCollectorStarved scrapes dts_jobs_starved_seconds: no series
// while every due job is served, then one for a name whose due job has
// waited beside a free worker that handles it for longer than
// store.StarvedAfter, valued at that wait.
func TestStateCollectorStarved(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(newStateCollector(r.store, func() *registry.Registry { return nil }, r.b.metrics))
	if err := r.store.WorkerSync(r.ctx, r.b.l.epoch, []store.WorkerRow{
		{ID: "w", JobTypes: []string{"zz_shout"}, State: "available", Concurrency: 1}}); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "dts_jobs_starved_seconds"); n != 0 {
		t.Fatalf("%d starved series with no job, want 0", n)
	}
	due := time.Now().Add(-2 * store.StarvedAfter)
	if _, err := r.store.JobInsert(r.ctx, []store.JobInsertParams{{Name: "zz_shout", RunAt: &due}}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "dts_jobs_starved_seconds" {
			continue
		}
		m := mf.GetMetric()
		if len(m) != 1 || m[0].GetLabel()[0].GetValue() != "zz_shout" || m[0].GetGauge().GetValue() < 2*store.StarvedAfter.Seconds()-5 {
			t.Fatalf("dts_jobs_starved_seconds = %v, want zz_shout at about %v", m, 2*store.StarvedAfter.Seconds())
		}
		return
	}
	t.Fatal("no dts_jobs_starved_seconds series for a starved name")
}
