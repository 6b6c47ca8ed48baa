package e2e

import (
	"strings"
	"testing"
)

// TestConformanceCatchesBrokenWorker runs checks of the suite against the
// Go conformance worker broken on purpose (CONFORMANCE_BREAK) and asserts
// that each fails, naming the rule broken: a suite that passes a broken
// worker proves nothing.
func TestConformanceCatchesBrokenWorker(t *testing.T) {
	t.Parallel()
	// Each check that must fail, and a word of the rule its error names.
	type want struct {
		check confCheck
		rule  string
	}
	t.Run("lie", func(t *testing.T) {
		// Reports every job completed without running its handler.
		t.Parallel()
		sdk := goConformanceSDK()
		sdk.Env = []string{"CONFORMANCE_BREAK=lie"}
		e := startConfShared(t, sdk)
		together(t, []want{
			{confCheck{"results", checkResults}, "result:"},
			{confCheck{"retries", checkRetries}, "retry:"},
			{confCheck{"permanent", checkPermanent}, "permanent failure:"},
			{confCheck{"progress", checkProgress}, "progress:"},
			{confCheck{"logs", checkLogs}, "logs:"},
			{confCheck{"cancel_running", checkCancelRunning}, "cancel of a running job:"},
			{confCheck{"time_limit", checkTimeLimit}, "time limit:"},
		}, 4, func(w want) string { return w.check.name }, func(t *testing.T, w want) {
			expectCheckFails(t, e, w.check, w.rule)
		})
	})
	t.Run("rerun", func(t *testing.T) {
		// Keeps no lease tokens and ignores cancels and SIGTERM's drain.
		t.Parallel()
		sdk := goConformanceSDK()
		sdk.Env = []string{"CONFORMANCE_BREAK=rerun"}
		e := startConfIsolated(t, sdk)
		for _, w := range []want{ // in order: the second runs on the worker the first starts
			{confCheck{"cancel_before_delivery", checkCancelBeforeDelivery}, "cancel before delivery:"},
			{confCheck{"duplicate_and_stale_delivery", checkDuplicates}, "run once per token:"},
		} {
			t.Run(w.check.name, func(t *testing.T) { expectCheckFails(t, e, w.check, w.rule) })
		}
	})
}

func expectCheckFails(t *testing.T, e *confEnv, ch confCheck, rule string) {
	t.Helper()
	err := ch.run(t, e)
	switch {
	case err == nil:
		t.Errorf("check %s passed a broken worker", ch.name)
	case !strings.Contains(err.Error(), rule):
		t.Errorf("check %s failed, but not for the rule %q: %v", ch.name, rule, err)
	default:
		t.Logf("check %s failed as it should: %v", ch.name, err)
	}
}
