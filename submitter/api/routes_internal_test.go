package api

import (
	"os"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/auth"
)

// Every route of the table is documented in docs/api.md, under its method
// and path, and names a scope the tokens know; no route is in it twice.
func TestRoutesAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	seen := map[string]bool{}
	for _, rt := range (&API{}).routes() {
		key := rt.method + " " + rt.path
		if seen[key] {
			t.Errorf("%s is in the route table twice", key)
		}
		seen[key] = true
		if !auth.ValidScope(rt.scope) {
			t.Errorf("%s: scope %q is not a scope", key, rt.scope)
		}
		documented := strings.Contains(string(doc), key)
		for _, l := range lines { // or a table row: | GET | `/jobs/{id}` |
			if strings.Contains(l, "`"+rt.path+"`") && strings.Contains(l, rt.method) {
				documented = true
			}
		}
		if !documented {
			t.Errorf("%s is not in docs/api.md", key)
		}
	}
}
