package submitter_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/dtsched/dts/internal/wire"
)

// submitStatus posts body to path and decodes the answer's job id.
func (e *env) submitStatus(path, body string) (int, string) {
	e.t.Helper()
	status, b := e.do("POST", path, body)
	var r struct {
		JobID  string `json:"job_id"`
		TaskID string `json:"task_id"`
	}
	if status < 300 {
		if err := json.Unmarshal(b, &r); err != nil {
			e.t.Fatalf("decode %s: %v", b, err)
		}
	}
	if r.JobID == "" {
		r.JobID = r.TaskID
	}
	return status, r.JobID
}

func TestUniqueSubmitRepeatAnswersFirstJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.submit(`{"name":"report","payload":{"user":7,"day":1},"unique_for":3600}`)
	e.exec(`UPDATE jobs SET status = 'leased', lease_token = 1, worker_id = 'w' WHERE id = $1`, first.JobID)

	// Every single-job route, the same payload written otherwise: 200 (or
	// the route's own status) with the first job.
	for _, c := range []struct{ path, body string }{
		{"/submit_job", `{"name":"report","payload":{ "day":1, "user":7 },"unique_for":3600}`},
		{"/jobs", `{"type":"report","payload":{"user":7,"day":1},"unique_for":60,"max_attempts":2}`},
		{"/api/tasks", `{"type":"report","payload":{"user":7,"day":1},"unique_for":60}`},
		{"/addJob", `{"name":"report","payload":{"user":7,"day":1},"unique_for":60}`},
	} {
		status, id := e.submitStatus(c.path, c.body)
		want := map[string]int{"/api/tasks": http.StatusAccepted}[c.path]
		if want == 0 {
			want = http.StatusOK
		}
		if status != want || id != first.JobID {
			t.Errorf("%s: %d job %s, want %d job %s", c.path, status, id, want, first.JobID)
		}
	}
	var again wire.SubmitResponse
	status, body := e.do("POST", "/submit_job", `{"name":"report","payload":{"user":7,"day":1},"unique_for":1}`)
	e.must(http.StatusOK, &again, status, body)
	if again.JobID != first.JobID || again.Status != "leased" {
		t.Errorf("repeat = %+v, want job %s leased", again, first.JobID)
	}
	// Another payload, or no unique_for, is another job.
	if status, id := e.submitStatus("/submit_job", `{"name":"report","payload":{"user":8,"day":1},"unique_for":3600}`); status != 201 || id == first.JobID {
		t.Errorf("other payload: %d job %s, want a new job", status, id)
	}
	if status, id := e.submitStatus("/submit_job", `{"name":"report","payload":{"user":7,"day":1}}`); status != 201 || id == first.JobID {
		t.Errorf("no unique_for: %d job %s, want a new job", status, id)
	}
	if n := e.jobCount(); n != 3 {
		t.Errorf("%d jobs, want 3", n)
	}

	// After the window: a new job.
	e.exec(`UPDATE job_unique_claims SET expires_at = clock_timestamp() - interval '1 second'`)
	if status, id := e.submitStatus("/submit_job", `{"name":"report","payload":{"user":7,"day":1},"unique_for":3600}`); status != 201 || id == first.JobID {
		t.Errorf("after the window: %d job %s, want a new job", status, id)
	}
}

func TestUniqueStatesAndKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := `{"name":"sync","payload":{"n":%d},"unique_for":3600,"unique_key":"customer-7","unique_states":["pending","leased","retrying"]}`
	first := e.submit(fmt.Sprintf(body, 1))
	// The explicit key ignores the payload.
	if status, id := e.submitStatus("/submit_job", fmt.Sprintf(body, 2)); status != 200 || id != first.JobID {
		t.Fatalf("same key: %d job %s, want 200 job %s", status, id, first.JobID)
	}
	// Completed is not among the states: the key is free once it is.
	e.exec(`UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = $1`, first.JobID)
	if status, id := e.submitStatus("/submit_job", fmt.Sprintf(body, 3)); status != 201 || id == first.JobID {
		t.Errorf("after completion: %d job %s, want a new job", status, id)
	}
	// With the default states, completed still counts.
	second := e.submit(`{"name":"sync","unique_for":3600,"unique_key":"customer-8"}`)
	e.exec(`UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = $1`, second.JobID)
	if status, id := e.submitStatus("/submit_job", `{"name":"sync","unique_for":3600,"unique_key":"customer-8"}`); status != 200 || id != second.JobID {
		t.Errorf("completed, default states: %d job %s, want 200 job %s", status, id, second.JobID)
	}
}

func TestUniqueConcurrentSubmits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 20
	statuses, ids := make([]int, n), make([]string, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			req, err := http.NewRequestWithContext(t.Context(), "POST", e.http.URL+"/submit_job",
				strings.NewReader(`{"name":"once","payload":[1,2,3],"unique_for":600}`))
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := e.http.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var r wire.SubmitResponse
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
				t.Error(err)
			}
			statuses[i], ids[i] = resp.StatusCode, r.JobID
		})
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range n {
		if statuses[i] == http.StatusCreated {
			created++
		} else if statuses[i] != http.StatusOK {
			t.Errorf("submit %d: status %d", i, statuses[i])
		}
		if ids[i] != ids[0] {
			t.Errorf("submit %d: job %s, submit 0: job %s", i, ids[i], ids[0])
		}
	}
	if created != 1 || e.jobCount() != 1 {
		t.Errorf("%d answered 201, %d jobs; want 1 and 1", created, e.jobCount())
	}
}

func TestUniqueBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	held := e.submit(`{"name":"held","unique_for":600}`)
	var resp wire.BatchSubmitResponse
	status, body := e.do("POST", "/submit_jobs", `{"jobs":[
		{"name":"a","payload":{"k":1},"unique_for":600},
		{"name":"a","payload":{"k":1},"unique_for":600},
		{"name":"held","unique_for":60},
		{"name":"a","payload":{"k":2},"unique_for":600},
		{"name":"b","depends_on_index":[1]}],
		"callback":{"name":"cb","unique_for":600}}`)
	e.must(http.StatusCreated, &resp, status, body)
	j := resp.Jobs
	switch {
	case len(j) != 5 || resp.Callback == nil:
		t.Fatalf("answer %s", body)
	case j[1].JobID != j[0].JobID:
		t.Errorf("repeat inside the batch: job %s, want %s", j[1].JobID, j[0].JobID)
	case j[2].JobID != held.JobID:
		t.Errorf("held key: job %s, want %s", j[2].JobID, held.JobID)
	case j[3].JobID == j[0].JobID || j[4].Status != "waiting":
		t.Errorf("answer %s", body)
	}
	if n := e.jobCount(); n != 5 { // held, a, a 2, b, cb
		t.Errorf("%d jobs, want 5", n)
	}
	if n := e.count(`SELECT count(*) FROM job_dependencies WHERE child = $1 AND parent = $2`, j[4].JobID, j[0].JobID); n != 1 {
		t.Errorf("b does not wait on the repeat's job %s", j[0].JobID)
	}
	// The same batch again: every job is an earlier one, so 200.
	status, body = e.do("POST", "/submit_jobs", `[{"name":"a","payload":{"k":1},"unique_for":600},{"name":"held","unique_for":60}]`)
	e.must(http.StatusOK, &resp, status, body)
	if resp.Jobs[0].JobID != j[0].JobID || resp.Jobs[1].JobID != held.JobID {
		t.Errorf("repeated batch: %s", body)
	}
}

func TestUniqueBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct{ path, body, msg string }{
		{"/submit_job", `{"name":"x","unique_for":0}`, "unique_for: must be between 1 and 2592000"},
		{"/submit_job", `{"name":"x","unique_for":-5}`, "unique_for: must be between"},
		{"/submit_job", `{"name":"x","unique_for":2592001}`, "unique_for: must be between"},
		{"/submit_job", `{"name":"x","unique_for":1e30}`, "unique_for"},
		{"/submit_job", `{"name":"x","unique_for":"60"}`, "unique_for: must be an integer"},
		{"/submit_job", `{"name":"x","unique_for":1.5}`, "unique_for"},
		{"/submit_job", `{"name":"x","unique_for":60,"unique_states":["pending","done"]}`, `unique_states: "done" is not a job state`},
		{"/submit_job", `{"name":"x","unique_for":60,"unique_states":[]}`, "unique_states: must name at least one state"},
		{"/submit_job", `{"name":"x","unique_for":60,"unique_states":"pending"}`, "unique_states"},
		{"/submit_job", `{"name":"x","unique_for":60,"unique_states":[1]}`, "unique_states"},
		{"/submit_job", `{"name":"x","unique_states":["pending"]}`, "unique_states: only with unique_for"},
		{"/submit_job", `{"name":"x","unique_key":"k"}`, "unique_key: only with unique_for"},
		{"/submit_job", `{"name":"x","unique_for":60,"unique_key":"` + strings.Repeat("k", 201) + `"}`, "unique_key: is 201 characters"},
		{"/submit_job", `{"name":"x","unique_for":60,"unique_key":"a\u0001b"}`, "unique_key: must not contain control"},
		{"/submit_job", `{"name":"x","unique_for":60,"unique_key":7}`, "unique_key: must be a string"},
		{"/jobs", `{"type":"x","unique_for":-1}`, "unique_for: must be between"},
		{"/api/tasks", `{"type":"x","unique_for":"soon"}`, "unique_for"},
		{"/addJob", `{"name":"x","unique_for":60,"unique_states":["nope"]}`, "unique_states"},
		{"/submit_jobs", `[{"name":"x"},{"name":"x","unique_for":0}]`, "jobs[1].unique_for: must be between"},
		{"/submit_jobs", `[{"name":"x"},{"name":"x","unique_for":true}]`, "jobs[1].unique_for"},
		{"/submit_jobs", `{"jobs":[{"name":"x"}],"callback":{"name":"c","unique_for":-1}}`, "callback.unique_for"},
		{"/schedules", `{"name":"s","cron":"@daily","job":{"name":"x","unique_for":60}}`, "job.unique_for: not allowed in a schedule"},
	} {
		status, body := e.do("POST", c.path, c.body)
		var r wire.ErrorResponse
		_ = json.Unmarshal(body, &r)
		if status != http.StatusBadRequest || r.Error.Code != wire.CodeInvalidUnique || !strings.Contains(r.Error.Message, c.msg) {
			t.Errorf("%s %s: %d %s, want 400 %s containing %q", c.path, c.body, status, body, wire.CodeInvalidUnique, c.msg)
		}
	}
	if n := e.jobCount() + e.count(`SELECT count(*) FROM job_unique_claims`) + e.count(`SELECT count(*) FROM schedules`); n != 0 {
		t.Errorf("bad input wrote %d rows", n)
	}
}
