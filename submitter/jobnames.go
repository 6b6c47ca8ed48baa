package submitter

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// jobNamesTTL is how long a read of the workers' job types serves: the
// leader rewrites the table every second, so a fresher read learns nothing.
const jobNamesTTL = time.Second

// maxNamesListed bounds the handled names an unknown_job_name answer lists.
const maxNamesListed = 50

// jobNames are the names some worker the coordinator records handles, in
// any state (a worker being restarted still vouches for its names, so a
// rolling restart turns no valid submission into a 400), read at most once
// per jobNamesTTL: the opt-in check of Config.RejectUnknownJobNames, and
// the warnings of every submission's answer (nameWarnings).
type jobNames struct {
	load func(ctx context.Context) ([]string, error)
	now  func() time.Time

	mu     sync.Mutex
	at     time.Time // of the last successful load; zero: none yet
	known  map[string]bool
	sorted []string
}

func newJobNames(load func(context.Context) ([]string, error)) *jobNames {
	return &jobNames{load: load, now: time.Now}
}

// handled returns the set of handled names (with "*" when some worker takes
// every name) and the names sorted. A failed read keeps serving the last
// good one; with none, it returns the error.
func (n *jobNames) handled(ctx context.Context) (map[string]bool, []string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.at.IsZero() && n.now().Sub(n.at) < jobNamesTTL {
		return n.known, n.sorted, nil
	}
	types, err := n.load(ctx)
	if err != nil {
		if n.at.IsZero() {
			return nil, nil, err
		}
		return n.known, n.sorted, nil
	}
	n.known = make(map[string]bool, len(types))
	for _, t := range types {
		n.known[t] = true
	}
	n.sorted, n.at = types, n.now()
	return n.known, n.sorted, nil
}

// checkJobNames refuses, with 400 unknown_job_name, a submission holding a
// job whose name no worker handles, when Config.RejectUnknownJobNames is
// on. In a batch the message names the item (jobs[3].name).
func (s *Server) checkJobNames(ctx context.Context, params []store.JobInsertParams, batch bool) error {
	if !s.cfg.RejectUnknownJobNames {
		return nil
	}
	known, sorted, err := s.names.handled(ctx)
	if err != nil {
		return s.storeError(storeOpJobTypes, err)
	}
	if known["*"] {
		return nil
	}
	for i, p := range params {
		if known[p.Name] {
			continue
		}
		field := "name"
		if batch {
			field = fmt.Sprintf("jobs[%d].name", i)
		}
		list := sorted
		more := ""
		if len(list) > maxNamesListed {
			list, more = list[:maxNamesListed], fmt.Sprintf(" and %d more", len(sorted)-maxNamesListed)
		}
		handled := "none (no worker has registered)"
		if len(list) > 0 {
			handled = strings.Join(slices.Clone(list), ", ") + more
		}
		return httpx.Errorf(http.StatusBadRequest, wire.CodeUnknownJobName,
			"%s: no worker handles %q; handled names: %s", field, p.Name, handled)
	}
	return nil
}

// maxNameWarnings bounds the warnings of one answer: a batch of many
// misspelled names gets the first few.
const maxNameWarnings = 10

// nameWarnings are the warnings of a submission's answer: one per distinct
// name of params that no worker the coordinator records handles (the jobs
// are stored all the same, and wait for such a worker). None while no
// worker is recorded at all (a fleet not started yet says nothing of a
// name), and none when the read of the workers fails: the answer does not
// depend on it.
func (s *Server) nameWarnings(ctx context.Context, params []store.JobInsertParams) []string {
	known, sorted, err := s.names.handled(ctx)
	if err != nil || len(sorted) == 0 || known["*"] {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, p := range params {
		if known[p.Name] || seen[p.Name] {
			continue
		}
		seen[p.Name] = true
		if len(out) == maxNameWarnings {
			out = append(out, "and more names no worker handles: see GET /stats unknown_names")
			break
		}
		out = append(out, fmt.Sprintf("no worker handles job name %q: the job waits until a worker with a handler of that name starts (a typo?)", p.Name))
	}
	return out
}
