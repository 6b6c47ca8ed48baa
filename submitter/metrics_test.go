package submitter

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestOpLabelsPreCreated: every storeOp and redisOp constant declared in
// this package has its dts_store_errors_total / dts_redis_errors_total
// series from the start, and call sites name ops by constant (an untyped
// string would compile, and could name a series nobody created).
func TestOpLabelsPreCreated(t *testing.T) {
	t.Parallel()
	consts := map[string][]string{"storeOp": nil, "redisOp": nil}
	type lit struct {
		pos, value string
	}
	var literals []lit
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
				if typ, ok := x.Type.(*ast.Ident); ok {
					if _, want := consts[typ.Name]; want {
						for _, v := range x.Values {
							if l, ok := v.(*ast.BasicLit); ok {
								s, _ := strconv.Unquote(l.Value)
								consts[typ.Name] = append(consts[typ.Name], s)
							}
						}
					}
				}
			case *ast.CallExpr:
				if !isOpCall(x.Fun) {
					return true
				}
				for _, a := range x.Args {
					if l, ok := a.(*ast.BasicLit); ok && l.Kind == token.STRING {
						v, _ := strconv.Unquote(l.Value)
						literals = append(literals, lit{fset.Position(l.Pos()).String(), v})
					}
				}
			}
			return true
		})
	}
	for _, l := range literals {
		t.Errorf("%s: op %q written as a literal; use a storeOp or redisOp constant", l.pos, l.value)
	}

	reg := prometheus.NewRegistry()
	newMetrics(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]map[string]bool{}
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

// isOpCall reports whether fun counts an op: storeError, countStoreError,
// countRedisError, or WithLabelValues on storeErrors or redisErrors.
func isOpCall(fun ast.Expr) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	switch sel.Sel.Name {
	case "storeError", "countStoreError", "countRedisError":
		return true
	case "WithLabelValues":
		inner, ok := sel.X.(*ast.SelectorExpr)
		return ok && (inner.Sel.Name == "storeErrors" || inner.Sel.Name == "redisErrors")
	}
	return false
}
