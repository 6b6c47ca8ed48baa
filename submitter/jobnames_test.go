package submitter_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter"
)

// TestStatsUnknownNames checks GET /stats unknown_names: waiting jobs whose
// name no available or busy worker handles, against real PostgreSQL.
func TestStatsUnknownNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(`INSERT INTO workers (id, state, job_types) VALUES
		('w1', 'available', '{email,noop}'), ('w2', 'draining', '{resize}'), ('w3', 'unavailable', '{archive}')`)
	for _, name := range []string{"emial", "emial", "email", "noop", "resize", "archive"} {
		e.submit(`{"name":"` + name + `"}`)
	}
	e.submit(`{"name":"emial","delay_seconds":3600}`) // not due yet: counted all the same
	var st wire.StatsResponse
	status, body := e.do("GET", "/stats", "")
	e.must(http.StatusOK, &st, status, body)
	want := map[string]int64{"emial": 3, "resize": 1, "archive": 1}
	if len(st.UnknownNames) != len(want) || st.UnknownNamesOther != 0 {
		t.Errorf("unknown_names = %v + %d, want %v", st.UnknownNames, st.UnknownNamesOther, want)
	}
	for k, v := range want {
		if st.UnknownNames[k] != v {
			t.Errorf("unknown_names[%s] = %d, want %d (%s)", k, st.UnknownNames[k], v, body)
		}
	}

	// A live catch-all worker handles every name.
	e.exec(`INSERT INTO workers (id, state, job_types) VALUES ('any', 'busy', '{*}')`)
	status, body = e.do("GET", "/stats", "")
	st = wire.StatsResponse{}
	e.must(http.StatusOK, &st, status, body)
	if !strings.Contains(string(body), `"unknown_names":{}`) || st.UnknownNamesOther != 0 {
		t.Errorf("with a \"*\" worker: %s", body)
	}
}

// TestRejectUnknownJobNames checks REJECT_UNKNOWN_JOB_NAMES: a job whose
// name no recorded worker handles gets 400 unknown_job_name and writes
// nothing; any recorded worker's names pass, whatever its state.
func TestRejectUnknownJobNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *submitter.Config) { c.RejectUnknownJobNames = true })
	refused := func(path, body, field, name, handled string) {
		t.Helper()
		status, b := e.do("POST", path, body)
		var er wire.ErrorResponse
		e.must(http.StatusBadRequest, &er, status, b)
		if er.Error.Code != wire.CodeUnknownJobName || !strings.HasPrefix(er.Error.Message, field+": no worker handles \""+name+"\"") ||
			!strings.Contains(er.Error.Message, handled) {
			t.Errorf("%s %s: %s", path, body, b)
		}
	}
	refused("/submit_job", `{"name":"email"}`, "name", "email", "none (no worker has registered)")

	e.exec(`INSERT INTO workers (id, state, job_types) VALUES ('w1', 'available', '{email,noop}'), ('w2', 'unavailable', '{resize}')`)
	// The submitter reads the workers' names at most once a second.
	testwait.For(t, 5*time.Second, "the new workers' names", func() bool {
		status, _ := e.do("POST", "/submit_job", `{"name":"noop"}`)
		return status == http.StatusCreated
	})
	e.submit(`{"name":"email"}`)
	e.submit(`{"name":"resize"}`) // its worker is down, maybe restarting: still accepted
	refused("/submit_job", `{"name":"emial"}`, "name", "emial", "handled names: email, noop, resize")
	refused("/jobs", `{"name":"Email"}`, "name", "Email", "email, noop, resize")
	before := e.jobCount()
	refused("/submit_jobs", `{"jobs":[{"name":"email"},{"name":"emial"}]}`, "jobs[1].name", "emial", "email, noop, resize")
	if n := e.jobCount(); n != before {
		t.Errorf("a refused batch wrote %d jobs", n-before)
	}
	status, b := e.do("POST", "/submit_jobs", `{"jobs":[{"name":"email"},{"name":"noop"}]}`)
	var br json.RawMessage
	e.must(http.StatusCreated, &br, status, b)

	// A worker that takes every name lets every name through.
	e.exec(`INSERT INTO workers (id, state, job_types) VALUES ('any', 'available', '{*}')`)
	testwait.For(t, 5*time.Second, "the catch-all worker", func() bool {
		status, _ := e.do("POST", "/submit_job", `{"name":"anything at all"}`)
		return status == http.StatusCreated
	})
}
