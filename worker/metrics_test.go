package worker

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

// TestOpLabelsPreCreated: every redisOp constant declared in this package
// has its dts_worker_redis_errors_total series from the start, and no call
// site passes an op as a literal (an untyped string would compile, and name
// a series nobody created).
func TestOpLabelsPreCreated(t *testing.T) {
	t.Parallel()
	var consts, literals []string
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
				if typ, ok := x.Type.(*ast.Ident); ok && typ.Name == "redisOp" {
					for _, v := range x.Values {
						if lit, ok := v.(*ast.BasicLit); ok {
							s, _ := strconv.Unquote(lit.Value)
							consts = append(consts, s)
						}
					}
				}
			case *ast.CallExpr:
				if !isOpCall(x.Fun) {
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
	for _, l := range literals {
		t.Errorf("%s: op written as a literal; use a redisOp constant", l)
	}
	if len(consts) == 0 {
		t.Fatal("no redisOp constants found")
	}

	reg := prometheus.NewRegistry()
	newMetrics(reg, 1, func() int { return 0 })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "dts_worker_redis_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" {
					series[l.GetValue()] = true
				}
			}
		}
	}
	for _, v := range consts {
		if !series[v] {
			t.Errorf("redisOp %q has no series in dts_worker_redis_errors_total: add it to redisOps", v)
		}
	}
}

// isOpCall reports whether fun counts an op: countRedisError, or
// WithLabelValues on redisErrors.
func isOpCall(fun ast.Expr) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	switch sel.Sel.Name {
	case "countRedisError":
		return true
	case "WithLabelValues":
		inner, ok := sel.X.(*ast.SelectorExpr)
		return ok && inner.Sel.Name == "redisErrors"
	}
	return false
}
