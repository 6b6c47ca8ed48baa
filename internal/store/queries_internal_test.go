package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
)

func TestParseQueries(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"q/a.sql": {Data: []byte(`-- The statements of a.go.

-- name: cols
-- Shared columns.
id, name

-- name: AGet
-- A comment about AGet.
SELECT {{cols}} FROM t
    WHERE id = $1 -- kept: inside the statement

-- name: AList
SELECT {{ cols }} FROM t ORDER BY id
`)},
		"q/b.sql":    {Data: []byte("-- name: BCount\nSELECT count(*) FROM t")},
		"q/note.txt": {Data: []byte("not a query file")},
	}
	got, err := parseQueries(fsys, "q")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]query{
		"cols":   {file: "a.sql", line: 3, text: "id, name"},
		"AGet":   {file: "a.sql", line: 7, text: "SELECT id, name FROM t\n    WHERE id = $1 -- kept: inside the statement"},
		"AList":  {file: "a.sql", line: 12, text: "SELECT id, name FROM t ORDER BY id"},
		"BCount": {file: "b.sql", line: 1, text: "SELECT count(*) FROM t"},
	}
	if len(got) != len(want) {
		t.Errorf("got %d blocks, want %d: %v", len(got), len(want), got)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("block %s = %+v, want %+v", name, got[name], w)
		}
	}
}

func TestParseQueriesRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"duplicate in a file", map[string]string{"a.sql": "-- name: A\nSELECT 1\n-- name: A\nSELECT 2\n"},
			"a.sql:3: block A is already defined at a.sql:1"},
		{"duplicate across files", map[string]string{"a.sql": "-- name: A\nSELECT 1\n", "b.sql": "\n-- name: A\nSELECT 2\n"},
			"b.sql:2: block A is already defined at a.sql:1"},
		{"SQL before the first name", map[string]string{"a.sql": "-- header\nSELECT 1\n-- name: A\nSELECT 2\n"},
			`a.sql:2: SQL before the first "-- name:" line`},
		{"no name", map[string]string{"a.sql": "-- name:\nSELECT 1\n"}, `a.sql:1: block name "" is not an identifier`},
		{"name not an identifier", map[string]string{"a.sql": "-- name: job-get\nSELECT 1\n"},
			`a.sql:1: block name "job-get" is not an identifier`},
		{"no SQL", map[string]string{"a.sql": "-- name: A\n-- only a comment\n\n-- name: B\nSELECT 1\n"}, "a.sql:1: block A has no SQL"},
		{"unknown fragment", map[string]string{"a.sql": "-- name: A\nSELECT {{cols}} FROM t\n"},
			"a.sql:1: block A includes unknown fragment {{cols}}"},
		{"statement as fragment", map[string]string{"a.sql": "-- name: A\nSELECT 1\n-- name: B\nSELECT * FROM ({{A}}) x\n"},
			"a.sql:3: block B includes {{A}}, a statement, not a fragment"},
		{"nested fragment", map[string]string{"a.sql": "-- name: cols\nid, {{more}}\n-- name: more\nname\n"},
			"a.sql:1: fragment cols includes {{more}}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fsys := fstest.MapFS{}
			for name, text := range tc.files {
				fsys["q/"+name] = &fstest.MapFile{Data: []byte(text)}
			}
			_, err := parseQueries(fsys, "q")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseQueries = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A malformed queries file stops the package at init (mustParseQueries
// initialises queries); an unknown name or a fragment's stops q.
func TestQueryLoaderPanics(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"duplicate at init": func() {
			mustParseQueries(fstest.MapFS{"q/a.sql": {Data: []byte("-- name: A\nSELECT 1\n-- name: A\nSELECT 2\n")}}, "q")
		},
		"unnamed at init": func() {
			mustParseQueries(fstest.MapFS{"q/a.sql": {Data: []byte("SELECT 1\n")}}, "q")
		},
		"unknown name":  func() { q("NoSuchBlock") },
		"fragment name": func() { q("jobColumns") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// sqlArgExempt lists, by Go file, the only SQL arguments of Query, QueryRow
// and Exec that are not q calls: whole files that Migrate applies.
var sqlArgExempt = map[string][]string{
	"migrate.go": {"string(m.body)", "functionsSQL"},
}

// Every statement block is run by exactly one q call, written in the
// function it is named after and in the Go file that shares its file's
// name; every Query, QueryRow and Exec of the package takes its SQL from a
// q call; every fragment is included somewhere.
func TestQueryBlocksMatchFunctions(t *testing.T) {
	t.Parallel()
	goFiles, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	used := map[string]int{}
	for _, path := range goFiles {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			prefix := string(unicode.ToUpper(rune(fn.Name.Name[0]))) + fn.Name.Name[1:]
			ast.Inspect(fn, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				at := fset.Position(call.Pos())
				if name, ok := qCall(call); ok {
					used[name]++
					b, found := queries[name]
					switch {
					case name == "":
						t.Errorf("%s: q takes a string literal, so that this test can see it", at)
					case !found || isFragment(name):
						t.Errorf("%s: q(%q): no such statement block", at, name)
					case b.file != strings.TrimSuffix(path, ".go")+".sql":
						t.Errorf("%s: q(%q) in %s, but the block is in queries/%s", at, name, path, b.file)
					case name != prefix && !(strings.HasPrefix(name, prefix) && unicode.IsUpper(rune(name[len(prefix)]))):
						t.Errorf("%s: q(%q) in %s: a block is named after the function that runs it (%s or %s<Suffix>)",
							at, name, fn.Name.Name, prefix, prefix)
					}
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || len(call.Args) < 2 {
					return true
				}
				switch sel.Sel.Name {
				case "Query", "QueryRow", "Exec":
				default:
					return true
				}
				if _, ok := qCall(call.Args[1]); ok {
					return true
				}
				arg := types.ExprString(call.Args[1])
				for _, ok := range sqlArgExempt[path] {
					if arg == ok {
						return true
					}
				}
				t.Errorf("%s: %s runs %s; its SQL belongs in a block of queries/%s", at, sel.Sel.Name, arg,
					strings.TrimSuffix(path, ".go")+".sql")
				return true
			})
		}
	}
	included := map[string]bool{}
	sqlFiles, err := fs.Glob(queryFS, "queries/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range sqlFiles {
		b, err := fs.ReadFile(queryFS, path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fragmentRef.FindAllStringSubmatch(string(b), -1) {
			included[strings.TrimSpace(m[1])] = true
		}
	}
	for name, b := range queries {
		switch {
		case isFragment(name) && !included[name]:
			t.Errorf("queries/%s:%d: fragment %s is included by no block", b.file, b.line, name)
		case !isFragment(name) && used[name] != 1:
			t.Errorf("queries/%s:%d: block %s is run by %d q calls, want 1", b.file, b.line, name, used[name])
		}
	}
}

// qCall reports whether e is a call q("Name") and returns the name ("" if
// the argument is not a string literal).
func qCall(e ast.Expr) (string, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return "", false
	}
	if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "q" {
		return "", false
	}
	if len(call.Args) != 1 {
		return "", true
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", true
	}
	name, err := strconv.Unquote(lit.Value)
	if err != nil {
		return "", true
	}
	return name, true
}
