package queue

import (
	"reflect"
	"testing"

	"github.com/dtsched/dts/internal/wire"
)

// TestMergeWake: a wake-up put where one is pending merges into it.
func TestMergeWake(t *testing.T) {
	named := func(n ...string) wire.Wake { return wire.Wake{Names: n} }
	for _, c := range []struct {
		pending, put, want wire.Wake
		empty              bool
	}{
		{empty: true, put: wire.Wake{}, want: wire.Wake{}},
		{empty: true, put: wire.Wake{Limited: true}, want: wire.Wake{Limited: true}},
		{empty: true, put: named("a"), want: named("a")},
		{pending: wire.Wake{}, put: wire.Wake{Limited: true}, want: wire.Wake{Limited: true}},
		{pending: wire.Wake{Limited: true}, put: wire.Wake{}, want: wire.Wake{Limited: true}},
		{pending: named("b"), put: named("a"), want: named("a", "b")},
		{pending: named("b"), put: wire.Wake{}, want: wire.Wake{}},
	} {
		out := make(chan wire.Wake, 1)
		if !c.empty {
			out <- c.pending
		}
		mergeWake(out, c.put)
		if got := <-out; !reflect.DeepEqual(got, c.want) || len(out) != 0 {
			t.Errorf("pending %+v (empty %v), put %+v: got %+v and %d more; want %+v alone", c.pending, c.empty, c.put, got, len(out), c.want)
		}
	}
}
