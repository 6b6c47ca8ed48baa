package wire

import (
	"fmt"
	"reflect"
	"testing"
)

func TestWakeRoundTrip(t *testing.T) {
	t.Parallel()
	for _, w := range []Wake{{}, {Limited: true}, {Names: []string{"a"}}, {Names: []string{"a", "zz_shout"}}} {
		if got := ParseWake(FormatWake(w)); !reflect.DeepEqual(got, w) {
			t.Errorf("ParseWake(FormatWake(%+v)) = %+v", w, got)
		}
	}
	// Unknown payloads (a newer submitter's) are read the safe way.
	for _, s := range []string{"", "x", "n"} {
		if got := ParseWake(s); !got.Limited || got.Names != nil {
			t.Errorf("ParseWake(%q) = %+v, want limited, any name", s, got)
		}
	}
}

func TestWakeMerge(t *testing.T) {
	t.Parallel()
	a, b := Wake{Names: []string{"a", "b"}}, Wake{Names: []string{"b", "c"}}
	if got := a.Merge(b); !reflect.DeepEqual(got.Names, []string{"a", "b", "c"}) || got.Limited {
		t.Errorf("merge = %+v", got)
	}
	if got := a.Merge(Wake{}); got.Names != nil {
		t.Errorf("merge with any name = %+v, want any name", got)
	}
	if got := a.Merge(Wake{Limited: true}); !got.Limited || got.Names != nil {
		t.Errorf("merge with limited = %+v, want limited, any name", got)
	}
	var many Wake
	for i := range MaxWakeNames + 1 {
		w := Wake{Names: []string{fmt.Sprint(i)}}
		if i == 0 {
			many = w
			continue
		}
		many = many.Merge(w)
	}
	if many.Names != nil {
		t.Errorf("%d names merged = %d names, want any name", MaxWakeNames+1, len(many.Names))
	}
}

func TestWakeHandles(t *testing.T) {
	t.Parallel()
	w := Wake{Names: []string{"zz_shout"}}
	for _, c := range []struct {
		types []string
		want  bool
	}{{nil, true}, {[]string{"zz_shout"}, true}, {[]string{"noop", "sleep"}, false}} {
		if got := w.Handles(c.types); got != c.want {
			t.Errorf("Handles(%v) = %v, want %v", c.types, got, c.want)
		}
	}
	if !(Wake{}).Handles([]string{"noop"}) {
		t.Error("a wake-up for any name does not concern a group")
	}
	if (Wake{Names: []string{}}).Handles(nil) {
		t.Error("a wake-up for no name concerns the group handling any name")
	}
}
