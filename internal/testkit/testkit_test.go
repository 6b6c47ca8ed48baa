package testkit_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dtsched/dts/internal/testkit"
)

// fatalTB records a Fatal and stops the goroutine, as testing.T does, and
// records each Error, so a helper's failures can be asserted on.
type fatalTB struct {
	testing.TB
	msg    string
	errors []string
}

func (f *fatalTB) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatal(args ...any) { f.msg = fmt.Sprint(args...); runtime.Goexit() }

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fails runs fn with a fatalTB and returns what it failed with ("" if not).
func fails(t *testing.T, fn func(tb testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.msg
}

const operations = "# Operations\n\n" +
	"### a\n\n" +
	"| flag | env | default | meaning |\n" +
	"| --- | --- | --- | --- |\n" +
	"| -addr | `A_ADDR` | `:8080` | listen |\n" +
	"| -n | `N` | 4 | count |\n" +
	"| -d | `D` | 5m | wait |\n" +
	"| -e | `E` | `x` (or `y`) | either |\n" +
	"| -f | `F` | 2 × `D` | twice |\n" +
	"\n### b\n\n" +
	"| -g | `G` | 1 | one |\n"

func TestTestkitOperationsDefaults(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "operations.md")
	if err := os.WriteFile(path, []byte(operations), 0o600); err != nil {
		t.Fatal(err)
	}
	got := testkit.OperationsDefaults(t, path, "### a")
	want := map[string]string{
		"env": "default", "---": "---", // the header rows are read as rows too
		"A_ADDR": ":8080", "N": "4", "D": "5m", "E": "x (or y)", "F": "2 × D",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("OperationsDefaults = %v, want %v (the table ends at the next heading)", got, want)
	}

	if msg := fails(t, func(tb testing.TB) { testkit.OperationsDefaults(tb, path, "### c") }); msg == "" {
		t.Error("a missing heading did not fail")
	}
	if msg := fails(t, func(tb testing.TB) { testkit.OperationsDefaults(tb, path, "### b") }); msg == "" {
		t.Error("a table of one row did not fail")
	}
}

func TestTestkitDocDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		24 * time.Hour:          "24h",
		5 * time.Minute:         "5m",
		90 * time.Second:        "1m30s",
		250 * time.Millisecond:  "250ms",
		time.Hour + time.Minute: "1h1m",
	} {
		if got := testkit.DocDuration(d); got != want {
			t.Errorf("DocDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

const opsPackage = `package p

type storeOp string
type redisOp string

const (
	storeOpClaim storeOp = "claim"
	storeOpDone  storeOp = "done"
	redisOpPush  redisOp = "push"
	other        string  = "not an op"
)

func (m *metrics) run() {
	m.storeError(ctx, storeOpClaim, err)
	m.storeError(ctx, "literal_method", err)
	countRedisError("literal_func")
	m.redisErrors.WithLabelValues("literal_field").Inc()
	m.other.WithLabelValues("not_counted").Inc()
	m.log("not_counted")
}
`

func TestTestkitScanOps(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, src := range map[string]string{
		"p.go":      opsPackage,
		"p_test.go": "package p\n\nconst ignored storeOp = \"ignored\"\n",
		"notes.txt": "storeOp",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	consts, literals := testkit.ScanOps(t, dir, []string{"storeOp", "redisOp", "queueOp"},
		[]string{"storeError", "countRedisError", "redisErrors.WithLabelValues"})
	wantConsts := map[string][]string{"storeOp": {"claim", "done"}, "redisOp": {"push"}, "queueOp": nil}
	if !reflect.DeepEqual(consts, wantConsts) {
		t.Errorf("consts = %v, want %v", consts, wantConsts)
	}
	var values []string
	for _, l := range literals {
		values = append(values, l.Value)
	}
	if want := []string{"literal_method", "literal_func", "literal_field"}; !slices.Equal(values, want) {
		t.Errorf("literals = %v, want %v", values, want)
	}
	if want := filepath.Join(dir, "p.go") + ":15:20"; len(literals) > 0 && literals[0].Pos != want {
		t.Errorf("literal position %q, want %q", literals[0].Pos, want)
	}
}

func TestTestkitOpSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "errors_total", Help: "h"}, []string{"op"})
	other := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "other_total", Help: "h"}, []string{"kind"})
	reg.MustRegister(errs, other)
	errs.WithLabelValues("claim")
	errs.WithLabelValues("push")
	other.WithLabelValues("x")
	want := map[string]map[string]bool{"errors_total": {"claim": true, "push": true}}
	if got := testkit.OpSeries(t, reg); !reflect.DeepEqual(got, want) {
		t.Errorf("OpSeries = %v, want %v", got, want)
	}
}

func TestTestkitCheckOpSeries(t *testing.T) {
	t.Parallel()
	series := map[string]map[string]bool{"store_errors_total": {"claim": true}}
	metricOf := map[string]string{"storeOp": "store_errors_total", "redisOp": "redis_errors_total"}
	for _, tt := range []struct {
		name   string
		consts map[string][]string
		want   []string
	}{
		{"all present", map[string][]string{"storeOp": {"claim"}}, nil},
		{"no constants", map[string][]string{"storeOp": {"claim"}, "redisOp": nil},
			[]string{"no redisOp constants found"}},
		{"no series", map[string][]string{"storeOp": {"claim", "done"}},
			[]string{`storeOp "done" has no series in store_errors_total: add it to storeOps`}},
	} {
		f := &fatalTB{TB: t}
		testkit.CheckOpSeries(f, tt.consts, series, metricOf)
		if !slices.Equal(f.errors, tt.want) {
			t.Errorf("%s: errors %q, want %q", tt.name, f.errors, tt.want)
		}
	}
}
