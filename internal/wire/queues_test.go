package wire

import (
	"reflect"
	"testing"
)

func TestParseQueueWeights(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want []QueueWeight
		bad  bool
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: "critical:6,default:3,low:1", want: []QueueWeight{{"critical", 6}, {"default", 3}, {"low", 1}}},
		{in: " a , b:0 ", want: []QueueWeight{{"a", 1}, {"b", 0}}},
		{in: "tenant:x", want: []QueueWeight{{"tenant:x", 1}}},
		{in: "tenant:x:5", want: []QueueWeight{{"tenant:x", 5}}},
		{in: "a:-1", bad: true},
		{in: "a:1001", bad: true},
		{in: "a,a:2", bad: true},
		{in: "a,,b", bad: true},
		{in: ":3", bad: true},
		{in: "bad name", bad: true},
	} {
		got, err := ParseQueueWeights(c.in)
		if (err != nil) != c.bad || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseQueueWeights(%q) = %v, %v; want %v (error: %v)", c.in, got, err, c.want, c.bad)
		}
		if err == nil && got != nil {
			if again, err := ParseQueueWeights(FormatQueueWeights(got)); err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("round trip of %q: %v, %v", c.in, again, err)
			}
		}
	}
}
