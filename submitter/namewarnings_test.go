package submitter_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/testwait"
)

// TestUnknownNameWarningsEverywhere: every route that takes a job name for
// a job to run (the submit routes, the compatibility routes, a schedule's
// template) answers a name no recorded worker handles with the warning of
// POST /submit_job, word for word, and a handled name with none; an
// idempotent repeat (200) and a read of the schedule carry none.
func TestUnknownNameWarningsEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(`INSERT INTO workers (id, state, job_types) VALUES ('w1', 'available', '{email}')`)
	warnings := func(b []byte) []string {
		t.Helper()
		var v struct {
			Warnings []string `json:"warnings"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		return v.Warnings
	}
	// The submitter reads the workers' names at most once a second.
	var want []string
	testwait.For(t, 5*time.Second, "the worker's names", func() bool {
		want = e.submit(`{"name":"emial"}`).Warnings
		return len(want) == 1
	})

	for _, c := range []struct {
		path, unknown, known string
		status               int
	}{
		{"/jobs", `{"type":"emial"}`, `{"type":"email"}`, http.StatusCreated},
		{"/api/tasks", `{"type":"emial"}`, `{"type":"email"}`, http.StatusAccepted},
		{"/addJob", `{"name":"emial"}`, `{"name":"email"}`, http.StatusOK},
		{"/schedules", `{"name":"typo","cron":"@daily","job":{"name":"emial"}}`,
			`{"name":"fine","cron":"@daily","job":{"name":"email"}}`, http.StatusCreated},
	} {
		status, b := e.do("POST", c.path, c.unknown)
		if got := warnings(b); status != c.status || !slices.Equal(got, want) {
			t.Errorf("POST %s %s: %d %s, want %d with warnings %q", c.path, c.unknown, status, b, c.status, want)
		}
		status, b = e.do("POST", c.path, c.known)
		if got := warnings(b); status != c.status || got != nil {
			t.Errorf("POST %s %s: %d %s, want %d without warnings", c.path, c.known, status, b, c.status)
		}
	}
	status, b := e.do("POST", "/submit_jobs", `[{"name":"emial"},{"name":"email"}]`)
	var batch struct {
		Jobs []struct {
			Warnings []string `json:"warnings"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(b, &batch); err != nil || status != http.StatusCreated || len(batch.Jobs) != 2 ||
		!slices.Equal(batch.Jobs[0].Warnings, want) || batch.Jobs[1].Warnings != nil {
		t.Errorf("POST /submit_jobs: %d %s", status, b)
	}

	// An idempotent repeat created nothing: no warning.
	key := []string{"Idempotency-Key", "k1"}
	if status, b := e.do("POST", "/jobs", `{"type":"emial"}`, key...); status != http.StatusCreated || len(warnings(b)) != 1 {
		t.Errorf("POST /jobs with a key: %d %s", status, b)
	}
	if status, b := e.do("POST", "/jobs", `{"type":"emial"}`, key...); status != http.StatusOK || warnings(b) != nil {
		t.Errorf("POST /jobs repeated: %d %s, want 200 without warnings", status, b)
	}
	// The warning is the creation's answer, not part of the schedule.
	status, b = e.do("GET", "/schedules", "")
	if status != http.StatusOK || containsWarnings(b) {
		t.Errorf("GET /schedules: %d %s", status, b)
	}
}

// containsWarnings says whether a JSON answer holds a "warnings" key
// anywhere.
func containsWarnings(b []byte) bool {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["warnings"]; ok {
				return true
			}
			for _, x := range v {
				if walk(x) {
					return true
				}
			}
		case []any:
			if slices.ContainsFunc(v, walk) {
				return true
			}
		}
		return false
	}
	return walk(v)
}
