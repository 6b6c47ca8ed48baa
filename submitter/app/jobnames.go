package app

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
// the warnings of every submission's answer (NameWarnings).
type jobNames struct {
	load func(ctx context.Context) ([]string, error)
	now  func() time.Time

	loading sync.Mutex // held by the one caller reloading the names

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
//
// Every submission asks, so only one caller reloads: while it does, the
// others get the last good names at once (with none yet, they wait for
// it), and a slow database read holds up no submission but the reloader.
func (n *jobNames) handled(ctx context.Context) (map[string]bool, []string, error) {
	at, known, sorted := n.last()
	if !at.IsZero() && n.now().Sub(at) < jobNamesTTL {
		return known, sorted, nil
	}
	if at.IsZero() {
		n.loading.Lock()
	} else if !n.loading.TryLock() {
		return known, sorted, nil // another caller is reloading
	}
	defer n.loading.Unlock()
	if at, known, sorted = n.last(); !at.IsZero() && n.now().Sub(at) < jobNamesTTL {
		return known, sorted, nil // reloaded while this caller waited
	}
	types, err := n.load(ctx)
	if err != nil {
		if at.IsZero() {
			return nil, nil, err
		}
		return known, sorted, nil
	}
	known = make(map[string]bool, len(types))
	for _, t := range types {
		known[t] = true
	}
	n.mu.Lock()
	n.known, n.sorted, n.at = known, types, n.now()
	n.mu.Unlock()
	return known, types, nil
}

func (n *jobNames) last() (time.Time, map[string]bool, []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.at, n.known, n.sorted
}

// CheckJobNames refuses, with 400 unknown_job_name, a submission holding a
// job whose name no worker handles, when Config.RejectUnknownJobNames is
// on. In a batch the message names the item (jobs[3].name).
func (a *App) CheckJobNames(ctx context.Context, params []store.JobInsertParams, batch bool) error {
	if !a.cfg.RejectUnknownJobNames {
		return nil
	}
	known, sorted, err := a.names.handled(ctx)
	if err != nil {
		return a.storeError(storeOpJobTypes, err)
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

// NameWarnings are the warnings of the answer of every route that takes a
// job name for a job to run (a submission, a schedule's template): one per
// distinct name of params that no worker the coordinator records handles
// (the jobs are stored all the same, and wait for such a worker). None while no
// worker is recorded at all (a fleet not started yet says nothing of a
// name), and none when the read of the workers fails: the answer does not
// depend on it.
func (a *App) NameWarnings(ctx context.Context, params []store.JobInsertParams) []string {
	known, sorted, err := a.names.handled(ctx)
	if err != nil || len(sorted) == 0 || known["*"] {
		return nil
	}
	return nameWarnings(known, params)
}

// NameWarningsEach are NameWarnings of each job of a batch on its own
// (POST /submit_jobs answers per job), from one read of the names: nil
// when every name is handled, the common case, which costs a map lookup
// per job.
func (a *App) NameWarningsEach(ctx context.Context, params []store.JobInsertParams) [][]string {
	known, sorted, err := a.names.handled(ctx)
	if err != nil || len(sorted) == 0 || known["*"] {
		return nil
	}
	var out [][]string
	for i := range params {
		if known[params[i].Name] {
			continue
		}
		if out == nil {
			out = make([][]string, len(params))
		}
		out[i] = nameWarnings(known, params[i:i+1])
	}
	return out
}

func nameWarnings(known map[string]bool, params []store.JobInsertParams) []string {
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
