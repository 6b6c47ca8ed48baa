package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/startstop/startstoptest"
	"github.com/dtsched/dts/internal/store"
)

// Submissions that arrive while every flusher is busy share the next
// statement; a lone one is inserted at once, by itself.
func TestInsertBatcherCoalescesWhileBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var mu sync.Mutex
		var sizes []int
		insert := func(_ context.Context, ps []store.JobInsertParams) ([]store.JobInsertResult, error) {
			mu.Lock()
			sizes = append(sizes, len(ps))
			first := len(sizes) == 1
			mu.Unlock()
			if first {
				<-gate // the first statement is slow: the others queue meanwhile
			}
			out := make([]store.JobInsertResult, len(ps))
			for i, p := range ps {
				n := int64(0)
				fmt.Sscan(p.Name, &n)
				out[i] = store.JobInsertResult{ID: n, Created: true}
			}
			return out, nil
		}
		b := newInsertBatcher(insert, 1, 1000, time.Minute, nil)
		_ = b.Start(t.Context())
		defer b.Stop()

		got := make([]int64, 21)
		var wg sync.WaitGroup
		submit := func(i int) {
			defer wg.Done()
			r, err := b.Insert(t.Context(), store.JobInsertParams{Name: fmt.Sprint(i + 100)})
			if err != nil {
				t.Errorf("submission %d: %v", i, err)
			}
			got[i] = r.ID
		}
		wg.Add(1)
		go submit(0)
		synctest.Wait() // submission 0 is in the slow statement
		for i := 1; i < 21; i++ {
			wg.Add(1)
			go submit(i)
		}
		synctest.Wait() // the other 20 wait for the flusher
		close(gate)
		wg.Wait()

		if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != 20 {
			t.Errorf("rows per statement = %v, want [1 20]", sizes)
		}
		for i, id := range got {
			if id != int64(i+100) {
				t.Errorf("submission %d answered with job %d, want %d", i, id, i+100)
			}
		}
	})
}

// A submission whose client has gone before its statement starts is not
// inserted; one that cannot be handed over before ctx ends returns ctx's
// error; after Close, Insert fails instead of waiting forever.
func TestInsertBatcherContextsAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		insert := func(_ context.Context, ps []store.JobInsertParams) ([]store.JobInsertResult, error) {
			calls++
			return make([]store.JobInsertResult, len(ps)), nil
		}
		b := newInsertBatcher(insert, 1, 1000, time.Minute, nil)
		_ = b.Start(t.Context())
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		done := make(chan insertDone, 1)
		b.flush([]insertReq{{ctx: ctx, params: store.JobInsertParams{Name: "gone"}, done: done}})
		if d := <-done; !errors.Is(d.err, context.Canceled) || calls != 0 {
			t.Errorf("canceled submission: err %v after %d statements, want context.Canceled and none", d.err, calls)
		}
		b.Stop()
		if _, err := b.Insert(t.Context(), store.JobInsertParams{Name: "late"}); err == nil {
			t.Error("Insert after Stop succeeded")
		}
	})
}

// Stop waits for the statement running to finish, and that submission
// gets its answer.
func TestInsertBatcherStopWaitsForTheStatementRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		insert := func(_ context.Context, ps []store.JobInsertParams) ([]store.JobInsertResult, error) {
			<-gate
			return []store.JobInsertResult{{ID: 7, Created: true}}, nil
		}
		b := newInsertBatcher(insert, 2, 1000, time.Minute, nil)
		_ = b.Start(t.Context())
		var res store.JobInsertResult
		var err error
		inserted := make(chan struct{})
		go func() {
			res, err = b.Insert(t.Context(), store.JobInsertParams{Name: "a"})
			close(inserted)
		}()
		synctest.Wait() // in its statement
		closed := make(chan struct{})
		go func() {
			b.Stop()
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while a statement was running")
		default:
		}
		close(gate)
		<-inserted
		<-closed
		if err != nil || res.ID != 7 {
			t.Errorf("the running submission got %+v, %v; want job 7", res, err)
		}
	})
}

// Against PostgreSQL: every submission of a shared statement gets its own
// row back, and a row PostgreSQL refuses fails alone while the rest of its
// statement is inserted.
func TestInsertBatcherSharedStatementAgainstPostgres(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	st, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var statements []int
	insert := func(ctx context.Context, ps []store.JobInsertParams) ([]store.JobInsertResult, error) {
		statements = append(statements, len(ps))
		return st.JobInsert(ctx, ps)
	}
	b := newInsertBatcher(insert, 1, 1000, time.Minute, nil)
	_ = b.Start(t.Context())
	defer b.Stop()

	const n, bad = 50, 17
	reqs := make([]insertReq, n)
	for i := range reqs {
		name := "batched"
		if i == bad {
			name = strings.Repeat("x", 200) // the table's CHECK allows 128 characters
		}
		reqs[i] = insertReq{ctx: ctx, done: make(chan insertDone, 1), params: store.JobInsertParams{
			Name: name, Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), MaxRetries: 1}}
	}
	b.flush(reqs)
	if statements[0] != n || len(statements) != 1+n {
		t.Errorf("statements = %v, want one of %d rows, then each row alone", statements, n)
	}

	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i, r := range reqs {
		d := <-r.done
		if i == bad {
			if !errors.Is(d.err, job.ErrRefused) {
				t.Errorf("bad row: err = %v, want job.ErrRefused", d.err)
			}
			continue
		}
		if d.err != nil || !d.res.Created {
			t.Fatalf("row %d: %+v, %v", i, d.res, d.err)
		}
		var k int
		if err := db.QueryRow(ctx, `SELECT (payload->>'i')::int FROM jobs WHERE id = $1`, d.res.ID).Scan(&k); err != nil || k != i {
			t.Errorf("row %d answered with job %d, which holds row %d (%v)", i, d.res.ID, k, err)
		}
	}
	var count int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&count); err != nil || count != n-1 {
		t.Errorf("jobs in the table = %d (%v), want %d", count, err, n-1)
	}
}

// A statement that fails after the shared INSERT has written its rows must
// not be taken for one that wrote nothing: the batcher would insert the
// rows again. Here the idempotency-key lookup of a shared statement (one
// new job, one repeated key) fails with an ERROR; every submission must
// still end with exactly its own job, and no job may be created twice.
func TestInsertBatcherLookupErrorCreatesNoDuplicate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	fault := failStatement("FROM jobs WHERE idempotency_key = ANY")
	st, err := store.Open(ctx, url, store.Options{Configure: func(c *pgxpool.Config) { c.ConnConfig.Tracer = fault }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	old, err := st.JobInsert(ctx, []store.JobInsertParams{{Name: "old", IdempotencyKey: "k-old"}})
	if err != nil {
		t.Fatal(err)
	}
	b := newInsertBatcher(st.JobInsert, 1, 1000, time.Minute, nil)
	_ = b.Start(t.Context())
	defer b.Stop()

	reqs := []insertReq{
		{ctx: ctx, done: make(chan insertDone, 1), params: store.JobInsertParams{Name: "new", Payload: json.RawMessage(`1`)}},
		{ctx: ctx, done: make(chan insertDone, 1), params: store.JobInsertParams{Name: "again", IdempotencyKey: "k-old"}},
	}
	b.flush(reqs)
	if !fault.fired.Load() {
		t.Fatal("the key lookup never ran: the fault was not injected")
	}
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var created int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE name = 'new'`).Scan(&created); err != nil {
		t.Fatal(err)
	}
	if created != 1 {
		t.Errorf("%d jobs created for one submission, want 1", created)
	}
	newRes, againRes := <-reqs[0].done, <-reqs[1].done
	if newRes.err != nil || !newRes.res.Created {
		t.Errorf("new job: %+v, %v", newRes.res, newRes.err)
	}
	if againRes.err != nil || againRes.res.Created || againRes.res.ID != old[0].ID {
		t.Errorf("repeated key: %+v, %v; want job %d, not created", againRes.res, againRes.err, old[0].ID)
	}
}

// onStatement runs start on a statement's connection just before the first
// statement whose SQL contains sql, and end just after that statement.
type onStatement struct {
	sql        string
	start, end func(conn *pgx.Conn)
	fired      atomic.Bool
}

type onStatementKey struct{}

func (o *onStatement) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, o.sql) || !o.fired.CompareAndSwap(false, true) {
		return ctx
	}
	o.start(conn)
	return context.WithValue(ctx, onStatementKey{}, true)
}

func (o *onStatement) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(onStatementKey{}) != nil && o.end != nil {
		o.end(conn)
	}
}

// failStatement makes the first statement whose SQL contains sql fail with
// an ERROR from PostgreSQL: just before it runs, the session's search_path
// is pointed where no jobs table is (42P01 undefined_table); it is reset
// after (in an aborted transaction the reset fails, and the rollback
// resets it).
func failStatement(sql string) *onStatement {
	return &onStatement{sql: sql,
		start: func(conn *pgx.Conn) {
			if _, err := conn.Exec(context.Background(), `SET search_path = pg_catalog`); err != nil {
				panic(fmt.Sprintf("inject fault: %v", err))
			}
		},
		end: func(conn *pgx.Conn) { _, _ = conn.Exec(context.Background(), `RESET search_path`) },
	}
}

// When the job holding a key is deleted (by retention) between the INSERT
// and the key's look-up, the key is free: that submission creates its job,
// and the other submissions of the shared statement get their own answers,
// never an error about another client's key.
func TestInsertBatcherKeyDeletedDuringInsert(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	retention := &onStatement{sql: "FROM jobs WHERE idempotency_key = ANY", start: func(*pgx.Conn) {
		if _, err := db.Exec(context.Background(), `DELETE FROM jobs WHERE idempotency_key = 'k-old'`); err != nil {
			panic(fmt.Sprintf("delete the old job: %v", err))
		}
	}}
	st, err := store.Open(ctx, url, store.Options{Configure: func(c *pgxpool.Config) { c.ConnConfig.Tracer = retention }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.JobInsert(ctx, []store.JobInsertParams{{Name: "old", IdempotencyKey: "k-old"}}); err != nil {
		t.Fatal(err)
	}
	b := newInsertBatcher(st.JobInsert, 1, 1000, time.Minute, nil)
	_ = b.Start(t.Context())
	defer b.Stop()

	reqs := []insertReq{
		{ctx: ctx, done: make(chan insertDone, 1), params: store.JobInsertParams{Name: "other", IdempotencyKey: "k-other"}},
		{ctx: ctx, done: make(chan insertDone, 1), params: store.JobInsertParams{Name: "again", IdempotencyKey: "k-old"}},
		{ctx: ctx, done: make(chan insertDone, 1), params: store.JobInsertParams{Name: "plain"}},
	}
	b.flush(reqs)
	if !retention.fired.Load() {
		t.Fatal("the key lookup never ran: the old job was not deleted during the insert")
	}
	for i, r := range reqs {
		d := <-r.done
		if d.err != nil || !d.res.Created {
			t.Errorf("submission %d (%s): %+v, %v; want its job created", i, r.params.Name, d.res, d.err)
			continue
		}
		var name string
		if err := db.QueryRow(ctx, `SELECT name FROM jobs WHERE id = $1`, d.res.ID).Scan(&name); err != nil || name != r.params.Name {
			t.Errorf("submission %d answered with job %d named %q (%v), want %q", i, d.res.ID, name, err, r.params.Name)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n); err != nil || n != 3 {
		t.Errorf("%d jobs (%v), want the 3 submitted", n, err)
	}
}

// Unique submissions coalesced with others into one statement: each gets
// its own row's answer (a repeat of a key in the same statement answers
// the first one's job, a held key the earlier job), and the jobs without
// unique_for are created as usual.
func TestInsertBatcherUniqueSharedStatement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	st, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	unique := func(name, payload string) store.JobInsertParams {
		return store.JobInsertParams{Name: name, Payload: json.RawMessage(payload), Unique: &store.Unique{For: time.Hour}}
	}
	held, err := st.JobInsert(ctx, []store.JobInsertParams{unique("held", `1`)})
	if err != nil {
		t.Fatal(err)
	}
	b := newInsertBatcher(st.JobInsert, 1, 1000, time.Minute, nil)
	_ = b.Start(t.Context())
	defer b.Stop()
	params := []store.JobInsertParams{
		unique("u", `{"a":1}`),
		{Name: "plain"},
		unique("u", `{"a":1}`),
		unique("held", `1`),
		{Name: "keyed", IdempotencyKey: "k"},
	}
	reqs := make([]insertReq, len(params))
	for i, p := range params {
		reqs[i] = insertReq{ctx: ctx, done: make(chan insertDone, 1), params: p}
	}
	b.flush(reqs)
	got := make([]store.JobInsertResult, len(reqs))
	for i, r := range reqs {
		d := <-r.done
		if d.err != nil {
			t.Fatalf("submission %d: %v", i, d.err)
		}
		got[i] = d.res
	}
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, i := range []int{0, 1, 4} {
		var name string
		if err := db.QueryRow(ctx, `SELECT name FROM jobs WHERE id = $1`, got[i].ID).Scan(&name); err != nil ||
			name != params[i].Name || !got[i].Created {
			t.Errorf("submission %d: %+v, job named %q (%v); want its own new job %q", i, got[i], name, err, params[i].Name)
		}
	}
	if got[2].Created || got[2].ID != got[0].ID {
		t.Errorf("repeat in the statement: %+v, want job %d", got[2], got[0].ID)
	}
	if got[3].Created || got[3].ID != held[0].ID {
		t.Errorf("held key: %+v, want job %d", got[3], held[0].ID)
	}
}

// Two unique submissions of one key share a statement, and the first also
// has an idempotency key that an unrelated job already holds: the first is
// answered with that job (as alone), which holds no claim and is not the
// key's, so the second is not answered with it but creates the key's job,
// as it would have had it arrived alone after the first.
func TestInsertBatcherUniqueRepeatAfterKeyedFirst(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	st, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	other, err := st.JobInsert(ctx, []store.JobInsertParams{{Name: "unrelated", IdempotencyKey: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	unique := func(key string) store.JobInsertParams {
		return store.JobInsertParams{Name: "report", Payload: json.RawMessage(`{"user":7}`), IdempotencyKey: key,
			Unique: &store.Unique{For: time.Hour}}
	}
	b := newInsertBatcher(st.JobInsert, 1, 1000, time.Minute, nil)
	_ = b.Start(t.Context())
	defer b.Stop()
	reqs := []insertReq{
		{ctx: ctx, done: make(chan insertDone, 1), params: unique("k")},
		{ctx: ctx, done: make(chan insertDone, 1), params: unique("")},
	}
	b.flush(reqs)
	got := make([]store.JobInsertResult, len(reqs))
	for i, r := range reqs {
		d := <-r.done
		if d.err != nil {
			t.Fatalf("submission %d: %v", i, d.err)
		}
		got[i] = d.res
	}
	if got[0].Created || got[0].ID != other[0].ID {
		t.Errorf("keyed submission: %+v, want the job %d holding its idempotency key", got[0], other[0].ID)
	}
	j, err := st.JobGet(ctx, got[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Name != "report" || !got[1].Created {
		t.Fatalf("second submission: %+v, job named %q; want a new job named report, not the unrelated job %d",
			got[1], j.Name, other[0].ID)
	}
	// The key is claimed by that new job.
	again, err := st.JobInsert(ctx, []store.JobInsertParams{unique("")})
	if err != nil || again[0].Created || again[0].ID != got[1].ID {
		t.Errorf("a later repeat: %+v, %v; want job %d", again, err, got[1].ID)
	}
}

// A submission without unique_for costs what it did before unique jobs:
// one statement (no transaction), which never reads job_unique_claims.
func TestInsertWithoutUniqueIsOneStatement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	var mu sync.Mutex
	var sqls []string
	tracer := &statementLog{log: func(sql string) { mu.Lock(); sqls = append(sqls, sql); mu.Unlock() }}
	st, err := store.Open(ctx, url, store.Options{Configure: func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mu.Lock()
	sqls = nil
	mu.Unlock()
	if _, err := st.JobInsert(ctx, []store.JobInsertParams{{Name: "a"}, {Name: "b", Payload: json.RawMessage(`{"x":1}`)}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sqls) != 1 || !strings.Contains(sqls[0], "INSERT INTO jobs") {
		t.Errorf("statements of a plain insert: %q, want the one INSERT", sqls)
	}
	for _, s := range sqls {
		if strings.Contains(s, "job_unique_claims") {
			t.Errorf("a plain insert ran %q", s)
		}
	}
}

// statementLog hands the SQL of every statement to log.
type statementLog struct{ log func(sql string) }

func (s *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.log(d.SQL)
	return ctx
}

func (s *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A batch mixing unique submissions with others is two statements: the
// jobs without unique_for keep theirs (one INSERT, no transaction).
func TestInsertBatcherKeepsUniqueApart(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls [][]string
	insert := func(_ context.Context, ps []store.JobInsertParams) ([]store.JobInsertResult, error) {
		names := make([]string, len(ps))
		out := make([]store.JobInsertResult, len(ps))
		for i, p := range ps {
			names[i] = p.Name
			fmt.Sscan(p.Name[1:], &out[i].ID)
			out[i].Created = true
		}
		mu.Lock()
		calls = append(calls, names)
		mu.Unlock()
		return out, nil
	}
	b := newInsertBatcher(insert, 1, 1000, time.Minute, nil)
	_ = b.Start(t.Context())
	defer b.Stop()
	u := &store.Unique{For: time.Minute}
	params := []store.JobInsertParams{{Name: "p1"}, {Name: "u2", Unique: u}, {Name: "p3"}, {Name: "u4", Unique: u}}
	reqs := make([]insertReq, len(params))
	for i, p := range params {
		reqs[i] = insertReq{ctx: t.Context(), done: make(chan insertDone, 1), params: p}
	}
	b.flush(reqs)
	for i, r := range reqs {
		if d := <-r.done; d.err != nil || d.res.ID != int64(i+1) {
			t.Errorf("submission %d: %+v, %v; want job %d", i, d.res, d.err, i+1)
		}
	}
	got := map[string]bool{}
	for _, c := range calls {
		got[strings.Join(c, ",")] = true
	}
	if len(calls) != 2 || !got["p1,p3"] || !got["u2,u4"] {
		t.Errorf("statements %v, want [p1 p3] and [u2 u4]", calls)
	}
	// Only one kind: one statement, as before.
	calls = nil
	b.flush(reqs[:1])
	<-reqs[0].done
	if len(calls) != 1 {
		t.Errorf("statements %v, want one", calls)
	}
}

// A batcher that was never started refuses at once instead of leaving the
// submission waiting for a flusher; and its Start and Stop keep the
// lifecycle's promises under concurrent use.
func TestInsertBatcherLifecycle(t *testing.T) {
	insert := func(_ context.Context, ps []store.JobInsertParams) ([]store.JobInsertResult, error) {
		return make([]store.JobInsertResult, len(ps)), nil
	}
	b := newInsertBatcher(insert, 2, 1000, time.Minute, nil)
	if _, err := b.Insert(t.Context(), store.JobInsertParams{Name: "early"}); !errors.Is(err, errInsertsStopped) {
		t.Fatalf("Insert before Start: %v, want errInsertsStopped", err)
	}
	startstoptest.Stress(t, b)
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Insert(t.Context(), store.JobInsertParams{Name: "again"}); err != nil {
		t.Fatalf("Insert after a restart: %v", err)
	}
	b.Stop()
}

func TestBacklogGuardLifecycle(t *testing.T) {
	count := func(ctx context.Context, _ int64) (int64, error) { return 0, ctx.Err() }
	startstoptest.Stress(t, newBacklogGuard(count, 10, time.Millisecond, slog.New(slog.DiscardHandler)))
}
