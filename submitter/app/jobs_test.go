package app

import (
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/store"
)

// TestCheckScan: the tests of a search are checked like the API's other
// texts, each named as the search box names it.
func TestCheckScan(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", maxSearchLen+1)
	for _, tc := range []struct {
		scan store.JobScan
		err  string // "" when accepted
	}{
		{store.JobScan{}, ""},
		{store.JobScan{Text: "a", Path: []string{"user", "0"}, PathValue: "7", Worker: "w1", Error: "refused"}, ""},
		{store.JobScan{Path: []string{"a"}, PathValue: ""}, ""},
		{store.JobScan{Worker: long}, "worker: is 201 characters long"},
		{store.JobScan{Error: "a\x00b"}, "error: must not contain control characters"},
		{store.JobScan{Text: "\xff"}, "payload: must be valid UTF-8"},
		{store.JobScan{Path: []string{"a", ""}}, "segments must not be empty"},
		{store.JobScan{Path: make([]string, maxSearchPath+1)}, "at most 16"},
		{store.JobScan{Path: []string{"a"}, PathValue: long}, "payload.a: is 201 characters long"},
	} {
		err := checkScan(tc.scan)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%+v refused: %v", tc.scan, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%+v: %v, want %q", tc.scan, err, tc.err)
		}
	}
}
