package coordinator

// Tests of the result applier against real transient PostgreSQL errors: a
// row lock held by another session makes the applier's statements time out
// (lock_timeout, 55P03) or be canceled (pg_cancel_backend, 57014) again and
// again; once the lock is gone, every job ends as its worker said.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// wait is one statement of another session waiting on a lock.
type wait struct {
	pid   int32
	start time.Time
}

// lockRow locks job id's row in a transaction of its own, until the
// returned release is called (or the test ends), and returns the pid of
// the session that holds it.
func (r *rig) lockRow(id int64) (pid int32, release func()) {
	r.t.Helper()
	tx, err := r.db.Begin(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := tx.QueryRow(r.ctx, `SELECT pg_backend_pid() FROM jobs WHERE id = $1 FOR UPDATE`, id).Scan(&pid); err != nil {
		r.t.Fatal(err)
	}
	release = func() { _ = tx.Rollback(context.WithoutCancel(r.ctx)) }
	r.t.Cleanup(release)
	return pid, release
}

// nextWait waits up to 10 s for a statement blocked by holder that is not
// in seen (each retry of the applier is a new statement, with a new start).
func (r *rig) nextWait(holder int32, seen map[wait]bool) wait {
	r.t.Helper()
	var next wait
	testwait.For(r.t, 10*time.Second, fmt.Sprintf("a statement blocked by pid %d (seen %d)", holder, len(seen)), func() bool {
		rows, err := r.db.Query(r.ctx, `SELECT pid, query_start FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder)
		if err != nil {
			r.t.Fatal(err)
		}
		ws, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (wait, error) {
			var w wait
			return w, row.Scan(&w.pid, &w.start)
		})
		if err != nil {
			r.t.Fatal(err)
		}
		for _, w := range ws {
			if !seen[w] {
				next = w
				return true
			}
		}
		return false
	})
	return next
}

// appliedAsSent checks that each job of cs completed with the result its
// worker sent, with the attempt the claim counted and no error recorded,
// and that the dead-letter mirror is empty.
func (r *rig) appliedAsSent(cs []store.Claimed, results []string) {
	r.t.Helper()
	testwait.NoError(r.t, 10*time.Second, "every job completed", func() error {
		if st := r.states(cs); !allIn(st, "completed") {
			return fmt.Errorf("states %v", st)
		}
		return nil
	})
	for i, c := range cs {
		var result json.RawMessage
		var attempts int
		var errs string
		if err := r.db.QueryRow(r.ctx, `SELECT result, attempts, coalesce(errors::text, '[]') FROM jobs WHERE id = $1`, c.ID).
			Scan(&result, &attempts, &errs); err != nil {
			r.t.Fatal(err)
		}
		if string(result) != results[i] || attempts != c.Attempt || errs != "[]" {
			r.t.Errorf("job %d: result %s, attempts %d, errors %s; want result %s, attempts %d, no errors",
				c.ID, result, attempts, errs, results[i], c.Attempt)
		}
	}
	if n, err := r.rdb.LLen(r.ctx, r.keys.DeadLetter()).Result(); err != nil || n != 0 {
		r.t.Errorf("dead-letter mirror holds %d entries (%v); want none", n, err)
	}
}

// sendCompleted sends a completion for each job of cs, in one batch.
func (r *rig) sendCompleted(cs []store.Claimed, results []string) {
	r.t.Helper()
	rs := make([]wire.Result, len(cs))
	for i, c := range cs {
		rs[i] = completed(c, results[i])
	}
	r.sendResults(rs...)
}

// TestLockTimeoutChangesNoOutcome: while another session holds a row lock,
// the applier's session (lock_timeout 100 ms) has its statements on that
// row refused with 55P03 again and again. That is no fault of the result:
// once the lock is released, every job of the batch is completed with its
// worker's result, no attempt is spent and nothing is dead.
func TestLockTimeoutChangesNoOutcome(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(3, "w")
	results := []string{`1`, `{"b": 2}`, `"c"`}
	st, err := store.Open(r.ctx, r.store.DatabaseURL(), store.Options{MaxConns: 4, PinIndexPlans: true, Configure: func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["lock_timeout"] = "100ms"
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	holder, release := r.lockRow(cs[1].ID)
	a := r.results()
	a.store = st
	r.sendCompleted(cs, results)
	r.start(a)
	seen := map[wait]bool{}
	for len(seen) < 3 {
		seen[r.nextWait(holder, seen)] = true
	}
	release()
	r.appliedAsSent(cs, results)
}

// TestCanceledStatementChangesNoOutcome: an operator (or a statement
// timeout) cancels the applier's statements with 57014 while they wait on
// a locked row, again and again; once the lock is released every job of
// the batch is completed with its worker's result.
func TestCanceledStatementChangesNoOutcome(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(3, "w")
	results := []string{`1`, `{"b": 2}`, `"c"`}
	holder, release := r.lockRow(cs[1].ID)
	r.sendCompleted(cs, results)
	r.start(r.results())
	seen := map[wait]bool{}
	for len(seen) < 3 {
		w := r.nextWait(holder, seen)
		seen[w] = true
		var ok bool
		if err := r.db.QueryRow(r.ctx, `SELECT pg_cancel_backend($1)`, w.pid).Scan(&ok); err != nil || !ok {
			t.Fatalf("cancel pid %d: %v, %v", w.pid, ok, err)
		}
	}
	release()
	r.appliedAsSent(cs, results)
}

// TestLonePoisonResultFails: a result PostgreSQL cannot store fails its
// attempt as invalid_result even when it is the only one read, and a good
// result sent after it completes.
func TestLonePoisonResultFails(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := r.insertLeased(2, "w")
	// Any result holding "refuse" is refused by PostgreSQL (23514), as a
	// CHECK or a trigger of an operator's could.
	if _, err := r.db.Exec(r.ctx, `ALTER TABLE jobs ADD CONSTRAINT no_refuse CHECK (result IS NULL OR NOT result ? 'refuse')`); err != nil {
		t.Fatal(err)
	}
	r.sendResults(completed(cs[0], `{"refuse":true}`))
	r.start(r.results())
	testwait.For(t, 10*time.Second, "the poison result applied", func() bool { return r.states(cs)[cs[0].ID] == "failed" })
	var reason string
	if err := r.db.QueryRow(r.ctx, `SELECT errors->0->>'reason' FROM jobs WHERE id = $1`, cs[0].ID).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if reason != job.ReasonInvalidResult {
		t.Errorf("reason %q, want %s", reason, job.ReasonInvalidResult)
	}
	r.sendResults(completed(cs[1], `2`))
	testwait.For(t, 10*time.Second, "the good result applied", func() bool { return r.states(cs)[cs[1].ID] == "completed" })
}
