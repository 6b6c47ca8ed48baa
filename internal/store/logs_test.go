package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// logLines returns n lines whose messages are "<tag>-<i>" padded to size
// bytes.
func logLines(tag string, n, size int) []wire.LogLine {
	out := make([]wire.LogLine, n)
	base := time.Now()
	for i := range out {
		msg := fmt.Sprintf("%s-%d ", tag, i)
		out[i] = wire.LogLine{Time: base.Add(time.Duration(i) * time.Microsecond), Level: "INFO",
			Message: msg + strings.Repeat("x", max(size-len(msg), 0))}
	}
	return out
}

func (e *env) logs(t *testing.T, q store.JobLogsQuery) ([]store.JobLogLine, map[int]int64) {
	t.Helper()
	if q.Limit == 0 {
		q.Limit = 10000
	}
	lines, drops, err := e.s.JobLogsGet(e.ctx, q)
	if err != nil {
		t.Fatalf("logs of %d: %v", q.ID, err)
	}
	m := map[int]int64{}
	for _, d := range drops {
		m[d.Attempt] = d.Dropped
	}
	return lines, m
}

// TestJobLogAppend: lines are stored under the job's attempt only while
// its lease holds (a stale token's, or another worker's, are not), in
// order, once even when the same result is applied twice, with the
// worker's dropped count; a follower reads only lines after a seq, and a
// reader one attempt's.
func TestJobLogAppend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.insertN(t, 1, "logs", 3)[0]
	c1 := e.claimOne(t, id, "w1")
	first := store.LogAppend{ID: id, LeaseToken: c1.LeaseToken, WorkerID: "w1", Lines: logLines("a", 2, 10), Dropped: 4}
	for range 2 { // the second time: a batch applied again after a leader change
		if err := e.s.JobLogAppend(e.ctx, e.epoch, []store.LogAppend{first}); err != nil {
			t.Fatal(err)
		}
	}
	for _, stale := range []store.LogAppend{
		{ID: id, LeaseToken: c1.LeaseToken + 1, WorkerID: "w1", Lines: logLines("stale", 1, 10), Dropped: 9},
		{ID: id, LeaseToken: c1.LeaseToken, WorkerID: "w2", Lines: logLines("other", 1, 10), Dropped: 9},
		{ID: id + 1000, LeaseToken: c1.LeaseToken, WorkerID: "w1", Lines: logLines("nojob", 1, 10)},
	} {
		if err := e.s.JobLogAppend(e.ctx, e.epoch, []store.LogAppend{stale}); err != nil {
			t.Fatal(err)
		}
	}
	e.fail(t, fixedPolicy(0), store.Failure{ID: id, LeaseToken: c1.LeaseToken, WorkerID: "w1", Error: "x", Reason: job.ReasonError})
	// The ended lease's late lines are stale too.
	if err := e.s.JobLogAppend(e.ctx, e.epoch, []store.LogAppend{{ID: id, LeaseToken: c1.LeaseToken, WorkerID: "w1", Lines: logLines("late", 1, 10)}}); err != nil {
		t.Fatal(err)
	}
	e.makeDue(t, id)
	c2 := e.claimOne(t, id, "w2")
	if err := e.s.JobLogAppend(e.ctx, e.epoch, []store.LogAppend{{ID: id, LeaseToken: c2.LeaseToken, WorkerID: "w2", Lines: logLines("b", 3, 10)}}); err != nil {
		t.Fatal(err)
	}

	lines, drops := e.logs(t, store.JobLogsQuery{ID: id})
	var got []string
	for _, l := range lines {
		got = append(got, fmt.Sprintf("%d:%s", l.Attempt, strings.Fields(l.Message)[0]))
	}
	if want := "1:a-0 1:a-1 2:b-0 2:b-1 2:b-2"; strings.Join(got, " ") != want {
		t.Errorf("lines %v; want %s", got, want)
	}
	if len(drops) != 1 || drops[1] != 4 {
		t.Errorf("drops %v; want attempt 1: 4", drops)
	}
	if lines[0].Level != "INFO" || lines[0].At.IsZero() {
		t.Errorf("line %+v", lines[0])
	}
	after, _ := e.logs(t, store.JobLogsQuery{ID: id, After: lines[2].Seq})
	if len(after) != 2 || after[0].Seq != lines[3].Seq {
		t.Errorf("after seq %d: %+v", lines[2].Seq, after)
	}
	two, drops2 := e.logs(t, store.JobLogsQuery{ID: id, Attempt: 2})
	if len(two) != 3 || len(drops2) != 0 {
		t.Errorf("attempt 2: %d lines, drops %v", len(two), drops2)
	}
	page, _ := e.logs(t, store.JobLogsQuery{ID: id, Limit: 2})
	if len(page) != 2 {
		t.Errorf("limit 2: %d lines", len(page))
	}
	if _, _, err := e.s.JobLogsGet(e.ctx, store.JobLogsQuery{ID: id + 1000, Limit: 10}); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("logs of no job: %v; want ErrNotFound", err)
	}

	// Retention deletes them with the job.
	fin, err := e.s.JobCompleteMany(e.ctx, e.epoch, []store.Completion{{ID: id, LeaseToken: c2.LeaseToken, WorkerID: "w2"}})
	if err != nil || len(fin) != 1 {
		t.Fatalf("complete: %v, %v", fin, err)
	}
	if n, err := e.s.JobCleanup(e.ctx, e.epoch, 0, 0, 100); err != nil || n != 1 {
		t.Fatalf("cleanup: %d, %v", n, err)
	}
	var left int64
	e.scalar(t, &left, `SELECT (SELECT count(*) FROM job_logs WHERE job_id = $1) + (SELECT count(*) FROM job_log_drops WHERE job_id = $1)`, id)
	if left != 0 {
		t.Errorf("%d log rows left after retention deleted the job", left)
	}
}

// TestJobLogBounds: each attempt keeps its newest wire.MaxAttemptLogBytes
// and the job its newest wire.MaxJobLogBytes, the oldest attempt's lines
// dropped first, and every dropped line is counted under its attempt.
func TestJobLogBounds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.insertN(t, 1, "logs", 10)[0]
	const size, perAttempt, attempts = 1000, 70, 5
	lineSize := size + wire.LogLineOverhead
	keepAttempt := wire.MaxAttemptLogBytes / lineSize // 63
	for a := 1; a <= attempts; a++ {
		c := e.claimOne(t, id, "w")
		all := logLines(fmt.Sprint("a", a), perAttempt, size)
		// Two results' worth, as a progress report and the outcome send them.
		for _, part := range [][]wire.LogLine{all[:perAttempt/2], all[perAttempt/2:]} {
			if err := e.s.JobLogAppend(e.ctx, e.epoch, []store.LogAppend{{ID: id, LeaseToken: c.LeaseToken, WorkerID: "w", Lines: part}}); err != nil {
				t.Fatal(err)
			}
		}
		e.fail(t, fixedPolicy(0), store.Failure{ID: id, LeaseToken: c.LeaseToken, WorkerID: "w", Error: "x", Reason: job.ReasonError})
		e.makeDue(t, id)
	}
	lines, drops := e.logs(t, store.JobLogsQuery{ID: id})
	perAtt, total := map[int]int{}, 0
	for _, l := range lines {
		perAtt[l.Attempt]++
		total += len(l.Message) + wire.LogLineOverhead
	}
	keepJob := wire.MaxJobLogBytes / lineSize // 254
	if total > wire.MaxJobLogBytes || len(lines) != keepJob {
		t.Errorf("kept %d lines, %d bytes; want %d lines within %d", len(lines), total, keepJob, wire.MaxJobLogBytes)
	}
	fromFirst := keepJob - (attempts-1)*keepAttempt
	for a := 1; a <= attempts; a++ {
		want := keepAttempt
		if a == 1 {
			want = fromFirst
		}
		if perAtt[a] != want || drops[a] != int64(perAttempt-want) {
			t.Errorf("attempt %d: kept %d, dropped %d; want %d and %d", a, perAtt[a], drops[a], want, perAttempt-want)
		}
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last.Message, fmt.Sprintf("a%d-%d ", attempts, perAttempt-1)) {
		t.Errorf("newest line %.20q; want the last attempt's last", last.Message)
	}
}
