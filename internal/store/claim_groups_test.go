package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// TestJobClaimGroups: one call claims for three groups of slots, each
// group only its own names, in priority order, up to its own slots, and
// each job to a slot of its group; a name no group takes stays pending.
func TestJobClaimGroups(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.insert(t,
		store.JobInsertParams{Name: "a"},
		store.JobInsertParams{Name: "a", Priority: 5},
		store.JobInsertParams{Name: "a"},
		store.JobInsertParams{Name: "b"},
		store.JobInsertParams{Name: "c"},
		store.JobInsertParams{Name: "d"},
		store.JobInsertParams{Name: "e"},
	)
	a1, a2, a3, b, c, d, other := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]
	got, err := e.s.JobClaimGroups(e.ctx, store.JobClaimGroupsParams{Epoch: e.epoch, Lease: time.Minute, Groups: []store.ClaimGroup{
		{Types: []string{"a"}, Slots: []string{"ga1", "ga2"}},
		{Types: []string{"b", "c"}, Slots: []string{"gbc1", "gbc1", "gbc2"}},
		{Types: []string{"zzz"}, Slots: []string{"gz"}},
		{Types: []string{"d"}, Slots: []string{"gd"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	to := map[int64]string{}
	for _, j := range got {
		if _, dup := to[j.ID]; dup {
			t.Fatalf("job %d leased twice", j.ID)
		}
		to[j.ID] = j.WorkerID
		if e.get(t, j.ID).LeaseToken != j.LeaseToken {
			t.Errorf("job %d: the row's token differs from the claim's", j.ID)
		}
	}
	want := map[int64]string{a2: "ga1", a1: "ga2", b: "gbc1", c: "gbc1", d: "gd"}
	if len(to) != len(want) {
		t.Fatalf("leased %v, want %v", to, want)
	}
	for id, w := range want {
		if to[id] != w {
			t.Errorf("job %d went to %q, want %q (all: %v)", id, to[id], w, to)
		}
	}
	for _, id := range []int64{a3, other} {
		if j := e.get(t, id); j.State != job.StatePending {
			t.Errorf("job %d is %s, want pending (no free slot, or no group takes it)", id, j.State)
		}
	}
	// Each token is its own: a slot's worker cannot finish another's job.
	tokens := map[int64]bool{}
	for _, j := range got {
		tokens[j.LeaseToken] = true
	}
	if len(tokens) != len(got) {
		t.Errorf("%d tokens for %d jobs", len(tokens), len(got))
	}
}

// TestJobClaimGroupsRefused: groups whose names overlap, a group of any
// name beside another, and a deposed leader's claim lease nothing.
func TestJobClaimGroupsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insertN(t, 3, "a", 0)
	for _, c := range []struct {
		name   string
		epoch  int64
		groups []store.ClaimGroup
		is     error
	}{
		{"a name in two groups", e.epoch, []store.ClaimGroup{{Types: []string{"a", "b"}, Slots: []string{"w1"}}, {Types: []string{"a"}, Slots: []string{"w2"}}}, nil},
		{"any name beside another group", e.epoch, []store.ClaimGroup{{Types: []string{"b"}, Slots: []string{"w1"}}, {Slots: []string{"w2"}}}, nil},
		{"a superseded epoch", e.epoch - 1, []store.ClaimGroup{{Types: []string{"a"}, Slots: []string{"w1"}}, {Types: []string{"b"}, Slots: []string{"w2"}}}, job.ErrDeposed},
	} {
		got, err := e.s.JobClaimGroups(e.ctx, store.JobClaimGroupsParams{Epoch: c.epoch, Lease: time.Minute, Groups: c.groups})
		if err == nil || len(got) != 0 || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("%s: claim = %v, %v; want an error (%v) and nothing", c.name, got, err, c.is)
		}
	}
	var leased int
	e.scalar(t, &leased, `SELECT count(*) FROM jobs WHERE status <> 'pending'`)
	if leased != 0 {
		t.Errorf("%d jobs left pending state after refused claims", leased)
	}
	// A group that names no job (not nil: none) claims none.
	if got, err := e.s.JobClaimGroups(e.ctx, store.JobClaimGroupsParams{Epoch: e.epoch, Lease: time.Minute,
		Groups: []store.ClaimGroup{{Types: []string{}, Slots: []string{"w"}}}}); err != nil || len(got) != 0 {
		t.Errorf("claim for a group of no names = %v, %v; want nothing", got, err)
	}
	// Alone, a group of any name is the plain claim.
	got, err := e.s.JobClaimGroups(e.ctx, store.JobClaimGroupsParams{Epoch: e.epoch, Lease: time.Minute,
		Groups: []store.ClaimGroup{{Slots: []string{"w", "w"}}}})
	if err != nil || len(got) != 2 || !slices.ContainsFunc(got, func(c store.Claimed) bool { return c.Name == "a" }) {
		t.Errorf("claim for one group of any name = %v, %v; want two a jobs", got, err)
	}
}

// nameDueIndex is the index docs/operations.md ("Mixed fleets") tells an
// operator of a mixed fleet to create.
const nameDueIndex = `CREATE INDEX CONCURRENTLY jobs_name_due_idx ON jobs (name, priority DESC, next_run_at, id)
    WHERE status IN ('pending', 'retrying') AND limit_key IS NULL`

// TestJobClaimGroupsOfOneNameReadOnlyTheirJobs: once the operator has
// created jobs_name_due_idx, in a backlog of 20,000 jobs over 50 names
// two groups of one name each claim 10 jobs apiece by reading about those
// rows alone, not the other names' rows they would skip in jobs_due_idx
// (some 50 per row claimed), with the generic plan the coordinator's
// sessions keep.
func TestJobClaimGroupsOfOneNameReadOnlyTheirJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, `INSERT INTO jobs (name) SELECT 'n' || (i % 50) FROM generate_series(1, 20000) AS i`)
	e.exec(t, nameDueIndex)
	e.exec(t, `ANALYZE jobs`)
	conn := claimSession(t, e)
	slots := make([]string, 20)
	for i := range slots {
		slots[i] = "w"
	}
	var n int
	if err := conn.QueryRow(e.ctx, `SELECT count(*) FROM dts_claim_group_jobs($1, '{n7,n31}', '{1,2}', '{f,f}', $2, '{10,20}', $3, 60000)`,
		e.epoch, slots, store.NewLeaseTokens(20)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	read := rowsRead(t, e, conn)
	if n != 20 || read > 100 {
		t.Errorf("two groups of one name claimed %d jobs reading %d rows; want 20 reading about 40", n, read)
	}
}

// TestJobClaimGroupsReadEachRowOnce: without jobs_name_due_idx, in a
// backlog of 20,000 jobs over 50 names, 50 groups of one name claim 10
// jobs each in one walk of the due jobs: about as many rows read as
// leased, not a walk per group past the other 49 names' rows (some
// 25,000 rows). Each job goes to a slot of its own name's group.
func TestJobClaimGroupsReadEachRowOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, `INSERT INTO jobs (name) SELECT 'n' || (i % 50) FROM generate_series(1, 20000) AS i`)
	e.exec(t, `ANALYZE jobs`)
	conn := claimSession(t, e)
	var types, slots []string
	var typeEnds, slotEnds []int32
	for g := range 50 {
		types = append(types, fmt.Sprintf("n%d", g))
		for range 10 {
			slots = append(slots, fmt.Sprintf("w%d", g))
		}
		typeEnds, slotEnds = append(typeEnds, int32(len(types))), append(slotEnds, int32(len(slots)))
	}
	rows, err := conn.Query(e.ctx, `SELECT name, worker_id FROM dts_claim_group_jobs($1, $2, $3, $4, $5, $6, $7, 60000)`,
		e.epoch, types, typeEnds, make([]bool, 50), slots, slotEnds, store.NewLeaseTokens(len(slots)))
	if err != nil {
		t.Fatal(err)
	}
	perGroup := map[string]int{}
	for rows.Next() {
		var name, worker string
		if err := rows.Scan(&name, &worker); err != nil {
			t.Fatal(err)
		}
		if worker != "w"+strings.TrimPrefix(name, "n") {
			t.Errorf("a job of %s went to %s", name, worker)
		}
		perGroup[name]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range types {
		if perGroup[name] != 10 {
			t.Errorf("group %s leased %d jobs, want 10 (all: %v)", name, perGroup[name], perGroup)
		}
	}
	read := rowsRead(t, e, conn)
	if read > 2000 {
		t.Errorf("50 groups leased 500 jobs reading %d rows; want about 1,000 (the walk and the lock)", read)
	}
}

// claimSession is a connection like the coordinator's (generic plans) in
// an open transaction, so that rowsRead counts its statements' reads.
func claimSession(t *testing.T, e *env) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(e.ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, sql := range []string{`SET plan_cache_mode = force_generic_plan`, `BEGIN`} {
		if _, err := conn.Exec(e.ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// rowsRead is how many rows of jobs conn's transaction fetched through
// indexes so far.
func rowsRead(t *testing.T, e *env, conn *pgx.Conn) int64 {
	t.Helper()
	var read int64
	if err := conn.QueryRow(e.ctx, `SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'jobs'`).Scan(&read); err != nil {
		t.Fatal(err)
	}
	return read
}
