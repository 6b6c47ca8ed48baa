package submitter_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"

	"github.com/dtsched/dts/internal/wire"
)

func TestSubmitDependsOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.submit(`{"name":"a"}`)
	// Ids as strings or numbers.
	b := e.submit(fmt.Sprintf(`{"name":"b","depends_on":["%s"]}`, a.JobID))
	if b.Status != "waiting" {
		t.Fatalf("b: %+v, want waiting", b)
	}
	c := e.submit(fmt.Sprintf(`{"name":"c","depends_on":[%s, %s]}`, a.JobID, b.JobID))
	if j := e.getJob(c.JobID); j.Status != "waiting" || j.Progress != nil {
		t.Fatalf("c: %+v", j)
	}

	// Unknown ids: 400 naming them, nothing created.
	before := e.jobCount()
	status, body := e.do("POST", "/submit_job", fmt.Sprintf(`{"name":"d","depends_on":["%s","999999","999998"]}`, a.JobID))
	var er wire.ErrorResponse
	e.must(http.StatusBadRequest, &er, status, body)
	if er.Error.Code != wire.CodeUnknownDependency || er.Error.Message != "depends_on: no job with id 999998, 999999" {
		t.Errorf("unknown ids: %s", body)
	}
	status, body = e.do("POST", "/submit_jobs", fmt.Sprintf(`[{"name":"x"},{"name":"y","depends_on":["%s","424242"]}]`, a.JobID))
	e.must(http.StatusBadRequest, &er, status, body)
	if er.Error.Code != wire.CodeUnknownDependency {
		t.Errorf("unknown ids in a batch: %s", body)
	}
	if n := e.jobCount(); n != before {
		t.Errorf("%d jobs after refused submissions, want %d", n, before)
	}

	for _, tc := range []struct{ path, body, want string }{
		{"/submit_job", `{"name":"d","depends_on":["x1"]}`, `depends_on: "x1" is not a job id (a positive integer)`},
		{"/submit_job", `{"name":"d","depends_on_index":[0]}`, "depends_on_index: only in a batch (POST /submit_jobs); use depends_on with job ids"},
		{"/submit_jobs", `[{"name":"a","depends_on_index":[0]}]`, "jobs[0].depends_on_index: 0 is not the index of an earlier job of the batch"},
		{"/submit_jobs", `{"jobs":[{"name":"a"}],"callback":{"name":"cb","depends_on":["1"]}}`,
			"callback: takes no depends_on or depends_on_index: it depends on every job of the batch"},
		{"/submit_jobs", `{"jobs":[{"name":"a"}],"callback":{"name":""}}`, "callback.name: required"},
	} {
		status, body := e.do("POST", tc.path, tc.body)
		e.must(http.StatusBadRequest, &er, status, body)
		if er.Error.Code != wire.CodeInvalidField || er.Error.Message != tc.want {
			t.Errorf("%s %s: %s, want %q", tc.path, tc.body, body, tc.want)
		}
	}

	// The parent completes (as the coordinator's statement would make it):
	// b is due; c still waits for b.
	e.exec(`UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = $1`, a.JobID)
	if j := e.getJob(b.JobID); j.Status != "pending" {
		t.Errorf("b after a completed: %s", j.Status)
	}
	if j := e.getJob(c.JobID); j.Status != "waiting" {
		t.Errorf("c after a completed: %s", j.Status)
	}
	// A waiting job can be canceled.
	var cr wire.SubmitResponse
	status, body = e.do("POST", "/jobs/"+c.JobID+"/cancel", "")
	e.must(http.StatusOK, &cr, status, body)
	if cr.Status != "canceled" {
		t.Errorf("cancel of a waiting job: %s", body)
	}
	var st wire.StatsResponse
	status, body = e.do("GET", "/stats", "")
	e.must(http.StatusOK, &st, status, body)
	if _, ok := st.Jobs["waiting"]; !ok {
		t.Errorf("stats has no waiting count: %s", body)
	}
}

func TestSubmitBatchCallback(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var resp wire.BatchSubmitResponse
	status, body := e.do("POST", "/submit_jobs", `{"jobs":[{"name":"a"},{"name":"b","depends_on_index":[0]},{"name":"c"}],
		"callback":{"name":"done","payload":{"batch":"nightly"},"priority":5}}`)
	e.must(http.StatusCreated, &resp, status, body)
	if len(resp.Jobs) != 3 || resp.Callback == nil {
		t.Fatalf("answer %s", body)
	}
	states := []string{resp.Jobs[0].Status, resp.Jobs[1].Status, resp.Jobs[2].Status, resp.Callback.Status}
	if want := []string{"pending", "waiting", "pending", "waiting"}; !reflect.DeepEqual(states, want) {
		t.Errorf("states %v, want %v", states, want)
	}
	a, b, c, cb := resp.Jobs[0].JobID, resp.Jobs[1].JobID, resp.Jobs[2].JobID, resp.Callback.JobID
	if j := e.getJob(cb); j.Priority != 5 || j.Name != "done" {
		t.Errorf("callback job %+v", j)
	}
	// a fails for good: b is canceled (a dependent); c completes. The
	// callback runs once all three are final, with their outcomes.
	e.exec(`UPDATE jobs SET status = 'failed', dead_reason = 'permanent', last_error = 'bad input', finished_at = now() WHERE id = $1`, a)
	if j := e.getJob(cb); j.Status != "waiting" {
		t.Fatalf("callback %s before c finished", j.Status)
	}
	e.exec(`UPDATE jobs SET status = 'completed', result = '{"rows":3}', finished_at = now() WHERE id = $1`, c)
	j := e.getJob(cb)
	if j.Status != "pending" {
		t.Fatalf("callback %s after every job finished", j.Status)
	}
	var got, want any
	if err := json.Unmarshal(j.Payload, &got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(fmt.Sprintf(`{"payload":{"batch":"nightly"},"jobs":[
		{"job_id":%q,"name":"a","status":"failed","result":null,"error":"bad input"},
		{"job_id":%q,"name":"b","status":"canceled","result":null,"error":"parent job %s failed"},
		{"job_id":%q,"name":"c","status":"completed","result":{"rows":3},"error":null}]}`, a, b, a, c)), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("callback payload %s", j.Payload)
	}
}
