package job

import (
	"encoding/json"
	"strings"
	"testing"
)

// NormalizeJSON compacts, refuses what jsonb would, and takes a value that
// is compact already as it is, without a copy.
func TestNormalizeJSON(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{in: "", want: "null"},
		{in: `{"a":[1,2,"x y"]}`, want: `{"a":[1,2,"x y"]}`},
		{in: " {\n\t\"a\" : [ 1 , 2 ] } ", want: `{"a":[1,2]}`},
		{in: `"tab\tinside"`, want: `"tab\tinside"`},
		{in: `{"a":1`, err: "must be valid JSON"},
		{in: `{"a":1}}`, err: "must be valid JSON"},
		{in: `[1 2]`, err: "must be valid JSON"},
		{in: `{"a":"\u0000"}`, err: "\\u0000"},
		{in: "\"\xff\"", err: "UTF-8"},
	} {
		got, err := NormalizeJSON(json.RawMessage(c.in), 1<<20)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("NormalizeJSON(%q) = %q, %v; want an error with %q", c.in, got, err, c.err)
		case c.err == "" && (err != nil || string(got) != c.want):
			t.Errorf("NormalizeJSON(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if raceEnabled {
		return // allocations are counted without the race detector (make test-short)
	}
	compact := json.RawMessage(`{"k":"` + strings.Repeat("a", 1<<16) + `"}`)
	if allocs := testing.AllocsPerRun(20, func() {
		if _, err := NormalizeJSON(compact, 1<<20); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("a compact value: %v allocations, want none (no copy)", allocs)
	}
}
