// Package testkit holds the checks the three services' tests make of
// themselves: that docs/operations.md states the defaults their flags take,
// and that every op label their error counters may carry is pre-created.
// One implementation here, so a change to the docs' table layout or to how
// ops are declared is made once. It is imported by _test.go files only, and
// imports only the standard library and Prometheus, so the worker module's
// test dependencies stay what they are.
package testkit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// OperationsDefaults reads the flag table under heading (a whole line, such
// as "### worker") in the Markdown file at path: environment variable →
// default, backticks removed. The table ends at the next heading; its
// header and separator lines are read as rows too (keys "env" and "---"
// here), which a caller looking up variables never sees. It fails
// the test if the heading is missing or fewer than five rows are found.
func OperationsDefaults(t testing.TB, path, heading string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s: no %q", path, heading)
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	defaults := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		cols := strings.Split(line, " | ")
		if len(cols) < 4 || !strings.HasPrefix(line, "| ") {
			continue
		}
		defaults[strings.Trim(cols[1], "`")] = strings.ReplaceAll(cols[2], "`", "")
	}
	if len(defaults) < 5 {
		t.Fatalf("%s: found only %d rows under %q", path, len(defaults), heading)
	}
	return defaults
}

// DocDuration writes d as the docs do: 24h, 5m, 250ms.
func DocDuration(d time.Duration) string {
	s := d.String()
	if h, ok := strings.CutSuffix(s, "h0m0s"); ok {
		return h + "h"
	}
	if m, ok := strings.CutSuffix(s, "m0s"); ok {
		return m + "m"
	}
	return s
}

// Literal is a string literal passed to an op-counting call.
type Literal struct {
	Pos   string // file:line:column
	Value string // unquoted
}

// ScanOps parses the non-test Go files of the package in dir. consts holds,
// for each name in types, the values of the constants declared with that
// type (a key for every name, nil if none is declared). literals holds every
// string literal passed as an argument to one of funcs, which are written
// "name" (a function or method of that name) or "field.Method" (Method
// called on a field or variable named field, such as
// "redisErrors.WithLabelValues"): an untyped string compiles where an op is
// wanted, and can name a series nobody created.
func ScanOps(t testing.TB, dir string, types, funcs []string) (consts map[string][]string, literals []Literal) {
	t.Helper()
	consts = map[string][]string{}
	for _, typ := range types {
		consts[typ] = nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.ValueSpec:
				typ, ok := x.Type.(*ast.Ident)
				if !ok {
					return true
				}
				if _, want := consts[typ.Name]; !want {
					return true
				}
				for _, v := range x.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						consts[typ.Name] = append(consts[typ.Name], s)
					}
				}
			case *ast.CallExpr:
				if !callsOneOf(x.Fun, funcs) {
					return true
				}
				for _, a := range x.Args {
					if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						literals = append(literals, Literal{fset.Position(lit.Pos()).String(), s})
					}
				}
			}
			return true
		})
	}
	return consts, literals
}

// callsOneOf reports whether fun is named by one of funcs, as ScanOps
// describes them.
func callsOneOf(fun ast.Expr, funcs []string) bool {
	var name, recv string
	switch f := fun.(type) {
	case *ast.Ident:
		name = f.Name
	case *ast.SelectorExpr:
		name = f.Sel.Name
		switch x := f.X.(type) {
		case *ast.Ident:
			recv = x.Name
		case *ast.SelectorExpr:
			recv = x.Sel.Name
		}
	default:
		return false
	}
	for _, want := range funcs {
		if r, m, ok := strings.Cut(want, "."); ok {
			if r == recv && m == name {
				return true
			}
		} else if want == name {
			return true
		}
	}
	return false
}

// OpSeries gathers reg: metric name → the values of its "op" label present.
// Metrics without an op label are left out.
func OpSeries(t testing.TB, reg prometheus.Gatherer) map[string]map[string]bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "op" {
					continue
				}
				if series[mf.GetName()] == nil {
					series[mf.GetName()] = map[string]bool{}
				}
				series[mf.GetName()][l.GetValue()] = true
			}
		}
	}
	return series
}

// CheckOpSeries fails the test for each type in consts that declares no
// constant, and for each constant whose value has no series in the metric
// metricOf[type] (series as OpSeries returns it): a label value first
// counted at an error would leave its rate undefined until then.
func CheckOpSeries(t testing.TB, consts map[string][]string, series map[string]map[string]bool, metricOf map[string]string) {
	t.Helper()
	for typ, values := range consts {
		if len(values) == 0 {
			t.Errorf("no %s constants found", typ)
		}
		for _, v := range values {
			if !series[metricOf[typ]][v] {
				t.Errorf("%s %q has no series in %s: add it to %ss", typ, v, metricOf[typ], typ)
			}
		}
	}
}
