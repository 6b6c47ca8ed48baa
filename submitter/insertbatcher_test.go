package submitter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/pgtest"
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
		defer b.Close()

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
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		done := make(chan insertDone, 1)
		b.flush([]insertReq{{ctx: ctx, params: store.JobInsertParams{Name: "gone"}, done: done}})
		if d := <-done; !errors.Is(d.err, context.Canceled) || calls != 0 {
			t.Errorf("canceled submission: err %v after %d statements, want context.Canceled and none", d.err, calls)
		}
		b.Close()
		if _, err := b.Insert(t.Context(), store.JobInsertParams{Name: "late"}); err == nil {
			t.Error("Insert after Close succeeded")
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
	st, err := store.Open(ctx, url, 0, false)
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
	defer b.Close()

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
