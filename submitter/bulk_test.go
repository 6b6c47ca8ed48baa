package submitter_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// TestBulkCancelWaiting: POST /jobs/bulk cancels waiting jobs (a
// dependency not yet done) as POST /jobs/{id}/cancel does, by default and
// with status=waiting, in both forms; their dependents are canceled too.
func TestBulkCancelWaiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// parent (pending) <- child (waiting) <- grandchild (waiting).
	family := func(child string) (parent, kid, grandchild string) {
		p := e.submit(`{"name":"parent"}`)
		c := e.submit(fmt.Sprintf(`{"name":%q,"depends_on":[%q]}`, child, p.JobID))
		g := e.submit(fmt.Sprintf(`{"name":"grandchild","depends_on":[%q]}`, c.JobID))
		if c.Status != "waiting" || g.Status != "waiting" {
			t.Fatalf("child %+v, grandchild %+v; want both waiting", c, g)
		}
		return p.JobID, c.JobID, g.JobID
	}
	check := func(body, parent, kid, grandchild string) {
		t.Helper()
		if st := e.getJob(parent).Status; st != "pending" {
			t.Errorf("%s: parent is %s, want pending", body, st)
		}
		if st := e.getJob(kid).Status; st != "canceled" {
			t.Errorf("%s: waiting child is %s, want canceled", body, st)
		}
		if st := e.getJob(grandchild).Status; st != "canceled" {
			t.Errorf("%s: grandchild is %s, want canceled with its parent", body, st)
		}
	}

	// The reference: one waiting job's cancel.
	p, c, g := family("one")
	var one wire.SubmitResponse
	status, b := e.do("POST", "/jobs/"+c+"/cancel", "")
	e.must(http.StatusOK, &one, status, b)
	check("POST /jobs/{id}/cancel", p, c, g)

	for _, tt := range []struct{ name, body string }{
		{"by_name", `{"action":"cancel","name":"by_name"}`},
		{"by_status", `{"action":"cancel","status":"waiting","name":"by_status"}`},
	} {
		body := tt.body
		p, c, g := family(tt.name)
		var dry wire.BulkResponse
		status, b := e.do("POST", "/jobs/bulk", body[:len(body)-1]+`,"dry_run":true}`)
		e.must(http.StatusOK, &dry, status, b)
		if dry.Matched != 1 {
			t.Errorf("%s dry run: %+v, want 1 matched", body, dry)
		}
		var res wire.BulkResponse
		status, b = e.do("POST", "/jobs/bulk", body)
		e.must(http.StatusOK, &res, status, b)
		if res.Matched != 1 || res.Affected != 1 {
			t.Errorf("%s: %+v, want 1 matched and affected", body, res)
		}
		check(body, p, c, g)
	}

	p, c, g = family("background")
	var started wire.BulkResponse
	status, b = e.do("POST", "/jobs/bulk", `{"action":"cancel","status":"waiting","name":"background","background":true}`)
	e.must(http.StatusAccepted, &started, status, b)
	var op wire.Operation
	testwait.For(t, 5*time.Second, "the operation to end", func() bool {
		op = e.operation(started.OperationID)
		return op.State != wire.OperationRunning
	})
	if op.State != wire.OperationDone || op.Matched != 1 || op.Affected != 1 {
		t.Errorf("background cancel: %+v", op)
	}
	check("background", p, c, g)
}
