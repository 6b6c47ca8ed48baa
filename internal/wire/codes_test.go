package wire_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestEveryCodeDeclared: every error code the services answer with is a
// Code* constant of this package, and docs/api.md's table lists each one.
// It reads the workspace's Go files (tests excluded) and fails on a code
// written as a literal: a Code: field of a composite literal, the code
// argument of httpx.Errorf, a "code" key of a map, or "code":"..." inside
// a string, that is not wire.CodeX (or a variable).
func TestEveryCodeDeclared(t *testing.T) {
	t.Parallel()
	declared := declaredCodes(t)
	root := workspaceRoot(t)

	var fset token.FileSet
	walkErr := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(&fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		inWire := f.Name.Name == "wire"
		check := func(n ast.Node, e ast.Expr) {
			if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				t.Errorf("%s:%d: error code %s written as a literal; use a wire.Code* constant",
					rel, fset.Position(n.Pos()).Line, lit.Value)
				return
			}
			var name string
			switch x := e.(type) {
			case *ast.SelectorExpr:
				if pkg, ok := x.X.(*ast.Ident); ok && pkg.Name == "wire" {
					name = x.Sel.Name
				}
			case *ast.Ident:
				if inWire {
					name = x.Name
				}
			}
			if strings.HasPrefix(name, "Code") {
				if _, ok := declared[name]; !ok {
					t.Errorf("%s:%d: %s is not a declared code", rel, fset.Position(n.Pos()).Line, name)
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.KeyValueExpr:
				switch k := x.Key.(type) {
				case *ast.Ident:
					if k.Name == "Code" {
						check(x, x.Value)
					}
				case *ast.BasicLit:
					if k.Value == `"code"` {
						check(x, x.Value)
					}
				}
			case *ast.CallExpr:
				if isErrorf(x.Fun, f.Name.Name) && len(x.Args) >= 2 {
					check(x, x.Args[1])
				}
			case *ast.BasicLit:
				if x.Kind != token.STRING {
					break
				}
				s, err := strconv.Unquote(x.Value)
				if err != nil {
					break
				}
				for _, m := range jsonCode.FindAllStringSubmatch(s, -1) {
					if !hasValue(declared, m[1]) {
						t.Errorf("%s:%d: error code %q in a JSON string is not declared", rel, fset.Position(x.Pos()).Line, m[1])
					}
				}
			}
			return true
		})
		return nil
	})
	if walkErr != nil {
		t.Fatal(walkErr)
	}

	doc, err := os.ReadFile(filepath.Join(root, "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, value := range declared {
		if !strings.Contains(string(doc), "| `"+value+"` |") {
			t.Errorf("%s (%q) has no row in docs/api.md's table of error codes", name, value)
		}
	}
}

var jsonCode = regexp.MustCompile(`"code"\s*:\s*"([^"]*)"`)

// isErrorf reports whether fun is httpx.Errorf (or Errorf inside httpx).
func isErrorf(fun ast.Expr, pkg string) bool {
	switch f := fun.(type) {
	case *ast.SelectorExpr:
		id, ok := f.X.(*ast.Ident)
		return ok && id.Name == "httpx" && f.Sel.Name == "Errorf"
	case *ast.Ident:
		return pkg == "httpx" && f.Name == "Errorf"
	}
	return false
}

func hasValue(m map[string]string, v string) bool {
	for _, x := range m {
		if x == v {
			return true
		}
	}
	return false
}

// declaredCodes returns the Code* constants of http.go: name → value.
func declaredCodes(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "http.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				if !strings.HasPrefix(n.Name, "Code") || i >= len(v.Values) {
					continue
				}
				lit, ok := v.Values[i].(*ast.BasicLit)
				if !ok {
					t.Fatalf("%s is not a string literal", n.Name)
				}
				codes[n.Name], _ = strconv.Unquote(lit.Value)
			}
		}
	}
	if len(codes) < 10 {
		t.Fatalf("found only %d codes in http.go", len(codes))
	}
	return codes
}

// workspaceRoot is the directory of go.work above this package.
func workspaceRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the package")
		}
		dir = parent
	}
}
