package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/worker"
)

// TestSubmitWarnsOfUnhandledName: dtsctl shows the warnings of the API's
// answer on stderr (a misspelled job name is accepted, with a warning),
// and stays silent for a name a worker handles.
func TestSubmitWarnsOfUnhandledName(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.run(map[string]worker.HandlerFunc{
		"email": func(context.Context, *worker.Job) (any, error) { return nil, nil },
	})
	const want = `dtsctl: warning: no worker handles job name "emial"`
	// The submitter learns the handled names from the workers the
	// coordinator records: wait until a misspelling is warned of.
	var r result
	testwait.For(t, 20*time.Second, "a warning for an unhandled name", func() bool {
		r = s.dtsctl("submit", "emial", "--delay", "1h", "-q")
		return r.code == 0 && strings.Contains(r.stderr, want)
	})
	if strings.TrimSpace(r.stdout) == "" || strings.Contains(r.stdout, "warning") {
		t.Errorf("submit emial: stdout %q, want the job id alone", r.stdout)
	}
	if r := s.dtsctl("submit", "email", "--delay", "1h", "-q"); r.code != 0 || r.stderr != "" {
		t.Errorf("submit email: exit %d, stderr %q; want no warning", r.code, r.stderr)
	}
	r = s.dtsctl("schedules", "create", "nightly", "--cron", "0 3 * * *", "--job", "emial", "-q")
	if r.code != 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("schedules create --job emial: exit %d, stderr %q; want %q", r.code, r.stderr, want)
	}
}
