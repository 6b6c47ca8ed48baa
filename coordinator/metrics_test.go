package coordinator

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestOpLabelsPreCreated: every storeOp and redisOp constant declared in
// this package has its dts_store_errors_total / dts_redis_errors_total
// series from the start, and no call site passes an op as a literal (an
// untyped string would compile, and name a series nobody created).
func TestOpLabelsPreCreated(t *testing.T) {
	t.Parallel()
	consts, literals := scanOps(t, map[string]bool{"storeError": true, "redisError": true,
		"countStoreError": true, "countRedisError": true})
	for _, l := range literals {
		t.Errorf("%s: op written as a literal; use a storeOp or redisOp constant", l)
	}
	reg := prometheus.NewRegistry()
	newMetrics(reg)
	series := map[string]map[string]bool{} // metric name → op values present
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" {
					if series[mf.GetName()] == nil {
						series[mf.GetName()] = map[string]bool{}
					}
					series[mf.GetName()][l.GetValue()] = true
				}
			}
		}
	}
	metricOf := map[string]string{"storeOp": "dts_store_errors_total", "redisOp": "dts_redis_errors_total"}
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

// scanOps parses the package's files: the values of its storeOp and
// redisOp constants, and the calls of funcs whose op argument (the one
// after ctx, or the first) is a string literal.
func scanOps(t *testing.T, funcs map[string]bool) (consts map[string][]string, literals []string) {
	t.Helper()
	consts = map[string][]string{"storeOp": nil, "redisOp": nil}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
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
					if lit, ok := v.(*ast.BasicLit); ok {
						s, _ := strconv.Unquote(lit.Value)
						consts[typ.Name] = append(consts[typ.Name], s)
					}
				}
			case *ast.CallExpr:
				sel, ok := x.Fun.(*ast.SelectorExpr)
				if !ok || !funcs[sel.Sel.Name] {
					return true
				}
				for _, a := range x.Args {
					if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						literals = append(literals, fset.Position(lit.Pos()).String())
					}
				}
			}
			return true
		})
	}
	return consts, literals
}

func TestTopUnhandled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		byName map[string]int64
		other  int64
		max    int
		want   map[string]int64
	}{
		{"none", map[string]int64{}, 0, 2, map[string]int64{"other": 0}},
		{"under the cap", map[string]int64{"emial": 3}, 0, 2, map[string]int64{"emial": 3, "other": 0}},
		{"over the cap, ties by name", map[string]int64{"a": 1, "b": 5, "c": 1, "d": 2}, 0, 2,
			map[string]int64{"b": 5, "d": 2, "other": 2}},
		{"the store's rest added", map[string]int64{"a": 1, "b": 5}, 7, 1, map[string]int64{"b": 5, "other": 8}},
		{"only the store's rest", map[string]int64{}, 4, 2, map[string]int64{"other": 4}},
		{"a job named other", map[string]int64{"other": 9, "x": 1}, 1, 5, map[string]int64{"x": 1, "other": 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := topUnhandled(tt.byName, tt.other, tt.max); !maps.Equal(got, tt.want) {
				t.Errorf("topUnhandled = %v, want %v", got, tt.want)
			}
		})
	}
}
