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

// TestClaimReadsOnlyItsNamesJobs: behind a backlog of 20,000 due jobs of
// one name whose workers are all busy, claims for other names read about
// the rows they lease, not the backlog, with the generic plans the
// coordinator's sessions keep: a claim for one name, for a group of two
// names (which still takes their jobs in priority order across the
// names), for two groups at once, and for any name. Every round of a
// mixed fleet's dispatch would otherwise read the whole backlog of the
// busiest name (about 100 ms per million jobs).
func TestClaimReadsOnlyItsNamesJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, `INSERT INTO jobs (name) SELECT 'a' FROM generate_series(1, 20000)`)
	e.exec(t, `INSERT INTO jobs (name) SELECT n FROM unnest('{b,c,d}'::text[]) AS n, generate_series(1, 100)`)
	urgent := e.insert(t, store.JobInsertParams{Name: "c", Priority: 5})[0]
	e.exec(t, `ANALYZE jobs`)
	conn := claimSession(t, e)
	slots := func(n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = "w"
		}
		return s
	}
	for _, c := range []struct {
		name     string
		sql      string
		args     []any
		want     int
		maxRead  int64
		wantName string // the name of every leased job, when one
	}{
		{"one name", `SELECT id, name FROM dts_claim_jobs($1, '{b}', $2, $3, 60000)`,
			[]any{slots(10), store.NewLeaseTokens(10)}, 10, 40, "b"},
		{"a group of two names", `SELECT id, name FROM dts_claim_jobs($1, '{b,c}', $2, $3, 60000)`,
			[]any{slots(20), store.NewLeaseTokens(20)}, 20, 100, ""},
		{"two groups", `SELECT id, name FROM dts_claim_group_jobs($1, '{b,c,d}', '{1,3}', '{f,f}', $2, '{10,30}', $3, 60000)`,
			[]any{slots(30), store.NewLeaseTokens(30)}, 30, 150, ""},
		{"any name", `SELECT id, name FROM dts_claim_jobs($1, NULL, $2, $3, 60000)`,
			[]any{slots(10), store.NewLeaseTokens(10)}, 10, 100, "a"},
	} {
		before := rowsRead(t, e, conn)
		rows, err := conn.Query(e.ctx, c.sql, append([]any{e.epoch}, c.args...)...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			var name string
			if err := rows.Scan(&id, &name); err != nil {
				t.Fatal(err)
			}
			if c.wantName != "" && name != c.wantName {
				t.Errorf("%s: leased a job of %s, want only %s", c.name, name, c.wantName)
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		read := rowsRead(t, e, conn) - before
		if len(ids) != c.want || read > c.maxRead {
			t.Errorf("%s: leased %d jobs reading %d rows; want %d reading at most %d", c.name, len(ids), read, c.want, c.maxRead)
		}
		if c.name == "a group of two names" && !slices.Contains(ids, urgent) {
			t.Errorf("%s: the c job of priority 5 was not leased first: %v", c.name, ids)
		}
	}
}

// TestJobClaimGroupsReadEachRowOnce: in a backlog of 20,000 jobs over 50
// names, 50 groups of one name claim 10 jobs each reading about the rows
// they lease, not the other 49 names' rows (some 25,000 rows for a walk
// per group in priority order), even planned without statistics. Each
// job goes to a slot of its own name's group.
func TestJobClaimGroupsReadEachRowOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, `INSERT INTO jobs (name) SELECT 'n' || (i % 50) FROM generate_series(1, 20000) AS i`)
	conn := claimSession(t, e) // and no ANALYZE: planned as on a fresh install
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
		t.Errorf("50 groups leased 500 jobs reading %d rows; want about 1,000 (each row read and locked)", read)
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

// TestClaimOfSeveralNamesTakesTheBestAcrossThem: a claim for several
// names leases exactly the best of their unlimited jobs (priority, then
// due time, then id), whether the names are mixed evenly among the best
// (each name's first share decides) or one name holds them all (its share
// is used up, and each name's best are read in full), and whichever way it
// reads them: one walk of the queue when the names are all that wait, in
// one queue, with no limited job; else name by name (another name waits,
// a limited job waits, a second queue has jobs).
func TestClaimOfSeveralNamesTakesTheBestAcrossThem(t *testing.T) {
	t.Parallel()
	for _, fill := range []struct{ name, sql string }{
		{"mixed evenly", `INSERT INTO jobs (name, next_run_at)
			SELECT (ARRAY['b','c','d'])[1 + i % 3], now() - interval '1 hour' + i * interval '1 second' FROM generate_series(1, 300) AS i`},
		{"one name ahead", `INSERT INTO jobs (name, next_run_at)
			SELECT n, now() - interval '1 hour' + (o * 1000 + i) * interval '1 millisecond'
			FROM unnest('{b,c,d}'::text[]) WITH ORDINALITY AS u(n, o), generate_series(1, 100) AS i`},
	} {
		for _, extra := range []struct{ name, sql string }{
			{"only theirs", ``},
			{"another name waits", `INSERT INTO jobs (name) VALUES ('e')`},
			{"a limited job waits", `INSERT INTO jobs (name, limit_key, priority) VALUES ('b', 'k', 9)`},
			{"a second queue", `INSERT INTO jobs (name, queue, next_run_at) VALUES ('b', 'other', now() - interval '2 hours')`},
		} {
			t.Run(fill.name+", "+extra.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				e.exec(t, fill.sql)
				e.exec(t, `INSERT INTO jobs (name, priority) VALUES ('d', 5)`)
				if extra.sql != "" {
					e.exec(t, extra.sql)
				}
				var want []int64
				rows, err := e.db.Query(e.ctx, `SELECT id FROM jobs WHERE limit_key IS NULL AND name IN ('b', 'c', 'd')
					ORDER BY priority DESC, next_run_at, id LIMIT 30`)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var id int64
					if err := rows.Scan(&id); err != nil {
						t.Fatal(err)
					}
					want = append(want, id)
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
				got, err := e.s.JobClaimBatch(e.ctx, store.JobClaimParams{Epoch: e.epoch, Types: []string{"b", "c", "d"},
					Slots: slices.Repeat([]string{"w"}, 30), Lease: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				var ids []int64
				for _, j := range got {
					ids = append(ids, j.ID)
				}
				slices.Sort(ids)
				slices.Sort(want)
				if !slices.Equal(ids, want) {
					t.Errorf("leased %v, want the best 30 %v", ids, want)
				}
			})
		}
	}
}
