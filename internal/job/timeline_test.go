package job

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func at(ms int) *time.Time { t := t0.Add(time.Duration(ms) * time.Millisecond); return &t }

// line is an entry as the tests compare it: offset, kind and the fields
// that kind uses.
func line(e TimelineEntry) string {
	s := fmt.Sprintf("%d %s", e.At.Sub(t0).Milliseconds(), e.Kind)
	if e.Attempt != 0 {
		s += fmt.Sprintf(" #%d", e.Attempt)
	}
	if e.WorkerID != "" {
		s += " w=" + e.WorkerID
	}
	if e.LeaseToken != 0 {
		s += fmt.Sprintf(" tok=%d", e.LeaseToken)
	}
	if e.Live {
		s += " live"
	}
	if e.Until != nil {
		s += fmt.Sprintf(" until=%d", e.Until.Sub(t0).Milliseconds())
	}
	if e.Extensions != 0 {
		s += fmt.Sprintf(" ext=%d", e.Extensions)
	}
	for _, f := range []struct{ k, v string }{{"reason", e.Reason}, {"error", e.Error}, {"outcome", e.Outcome},
		{"action", e.Action}, {"actor", e.Actor}, {"result", e.Result}} {
		if f.v != "" {
			s += " " + f.k + "=" + f.v
		}
	}
	if e.OfAttempt != 0 {
		s += fmt.Sprintf(" of=#%d", e.OfAttempt)
	}
	return s
}

func attemptLine(a Attempt) string {
	s := fmt.Sprintf("#%d w=%s tok=%d %s", a.Attempt, a.WorkerID, a.LeaseToken, a.Outcome)
	if d, ok := a.Duration(); ok {
		s += fmt.Sprintf(" %dms", d.Milliseconds())
	}
	if a.Live {
		s += " live"
	}
	if a.RetryAt != nil {
		s += fmt.Sprintf(" retry=%d", a.RetryAt.Sub(t0).Milliseconds())
	}
	if a.ExpiresAt != nil {
		s += fmt.Sprintf(" expires=%d", a.ExpiresAt.Sub(t0).Milliseconds())
	}
	if a.Error != "" {
		s += " error=" + a.Error
	}
	return s
}

// decodeErrors reads errors as the store does, from the column's JSON.
func decodeErrors(t *testing.T, s string) []AttemptError {
	t.Helper()
	var out []AttemptError
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

const hostile = `<script>alert(1)</script>"'`

func TestBuildTimeline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		job          Job
		errors       string // the errors column, as PostgreSQL writes it
		events       []Event
		want, tries  []string
		wantAttempts int
	}{
		{
			name: "pending, never run",
			job:  Job{State: StatePending},
			want: []string{"0 submitted"},
		},
		{
			name: "failed once with backoff, then completed on another worker",
			job: Job{State: StateCompleted, Attempts: 2, WorkerID: "wb", StartedAt: at(5000), FinishedAt: at(5300),
				LastLeaseToken: 222, LeaseExtensions: 1},
			errors: `[{"attempt":1,"error":"boom","reason":"error","worker_id":"wa","at":"2026-03-04T05:06:09+00:00",
				"token":111,"started":"2026-03-04T05:06:08.5+00:00","extended":0,"next_state":"retrying",
				"retry_at":"2026-03-04T05:06:11.5+00:00"}]`,
			want: []string{
				"0 submitted",
				"1500 leased #1 w=wa tok=111",
				"2000 failed #1 w=wa tok=111 reason=error error=boom",
				"2000 backoff #1 until=4500",
				"5000 leased #2 w=wb tok=222 ext=1",
				"5300 completed #2 w=wb tok=222",
			},
			tries: []string{"#1 w=wa tok=111 error 500ms retry=4500 error=boom", "#2 w=wb tok=222 completed 300ms"},
		},
		{
			name: "running: the live lease's token is withheld",
			job: Job{State: StateLeased, Attempts: 1, WorkerID: "w1", LeaseToken: 999, StartedAt: at(100),
				LeaseExpiresAt: at(30_100), LeaseExtensions: 4},
			want:  []string{"0 submitted", "100 leased #1 w=w1 live until=30100 ext=4"},
			tries: []string{"#1 w=w1 tok=0 running live expires=30100"},
		},
		{
			name: "entries from before migration 014: no token, start or backoff; dead by the row",
			job: Job{State: StateFailed, Attempts: 2, WorkerID: "w<b>2</b>", FinishedAt: at(9000), DeadReason: ReasonMaxRetriesExceeded,
				StartedAt: at(8000)},
			errors: `[{"attempt":1,"error":"` + strings.ReplaceAll(hostile, `"`, `\"`) + `","reason":"timeout","worker_id":"w1","at":"2026-03-04T05:06:08+00:00"},
				{"attempt":2,"error":"again","reason":"error","at":"2026-03-04T05:06:16+00:00"}]`,
			want: []string{
				"0 submitted",
				"1000 failed #1 w=w1 reason=timeout error=" + hostile,
				"9000 failed #2 reason=error error=again",
				"9000 dead #2 reason=max_retries_exceeded",
			},
			tries: []string{"#1 w=w1 tok=0 timeout error=" + hostile, "#2 w= tok=0 error error=again"},
		},
		{
			name: "permanent failure, dead by the entry",
			job:  Job{State: StateFailed, Attempts: 1, WorkerID: "w", FinishedAt: at(2000), DeadReason: ReasonPermanent},
			errors: `[{"attempt":1,"error":"bad input","reason":"permanent","worker_id":"w","at":"2026-03-04T05:06:09+00:00",
				"token":5,"started":"2026-03-04T05:06:08+00:00","next_state":"failed"}]`,
			want: []string{"0 submitted", "1000 leased #1 w=w tok=5", "2000 failed #1 w=w tok=5 reason=permanent error=bad input",
				"2000 dead #1 reason=permanent"},
		},
		{
			name: "dead, requeued by an operator, running again; a stale result of the first lease",
			job:  Job{State: StateLeased, Attempts: 1, WorkerID: "w2", LeaseToken: 77, StartedAt: at(7000), LeaseExpiresAt: at(37_000)},
			errors: `[{"attempt":1,"error":"x","reason":"error","worker_id":"w1","at":"2026-03-04T05:06:09+00:00",
				"token":5,"started":"2026-03-04T05:06:08+00:00","next_state":"failed"}]`,
			events: []Event{
				{At: *at(6500), Kind: EventStaleResult, WorkerID: "w1", LeaseToken: 5, Attempt: 1, Outcome: "completed"},
				{At: *at(6000), Kind: EventOperator, Action: "job.requeue", Actor: hostile, Result: "ok"},
				{At: *at(6600), Kind: EventStaleResult, WorkerID: hostile, LeaseToken: 77, Attempt: 1, Outcome: "failed"},
			},
			want: []string{
				"0 submitted",
				"1000 leased #1 w=w1 tok=5",
				"2000 failed #1 w=w1 tok=5 reason=error error=x",
				"2000 dead #1 reason=max_retries_exceeded",
				"6000 operator action=job.requeue actor=" + hostile + " result=ok",
				"6500 stale_result #1 w=w1 tok=5 outcome=completed of=#1",
				// The running lease's token, under another name: withheld.
				"6600 stale_result #1 w=" + hostile + " live outcome=failed of=#1",
				"7000 leased #1 w=w2 live until=37000",
			},
		},
		{
			name: "handed back, then completed",
			job:  Job{State: StateCompleted, Attempts: 1, WorkerID: "w2", StartedAt: at(3000), FinishedAt: at(3100), LastLeaseToken: 9},
			events: []Event{{At: *at(2000), Kind: EventReleased, WorkerID: "w1", LeaseToken: 8, Attempt: 1, StartedAt: at(1000),
				Extensions: 2, NextState: StatePending}},
			want: []string{"0 submitted", "1000 leased #1 w=w1 tok=8 ext=2", "2000 released #1 w=w1 tok=8",
				"3000 leased #1 w=w2 tok=9", "3100 completed #1 w=w2 tok=9"},
			tries: []string{"#1 w=w1 tok=8 released 1000ms", "#1 w=w2 tok=9 completed 100ms"},
		},
		{
			name: "canceled while running: the attempt says so once",
			job:  Job{State: StateCanceled, Attempts: 1, WorkerID: "w", FinishedAt: at(2000)},
			errors: `[{"attempt":1,"error":"canceled","reason":"canceled","worker_id":"w","at":"2026-03-04T05:06:09+00:00",
				"token":3,"started":"2026-03-04T05:06:08+00:00","next_state":"canceled"}]`,
			events: []Event{{At: *at(1500), Kind: EventOperator, Action: "job.cancel", Result: "ok"}},
			want: []string{"0 submitted", "1000 leased #1 w=w tok=3", "1500 operator action=job.cancel result=ok",
				"2000 failed #1 w=w tok=3 reason=canceled error=canceled", "2000 canceled #1"},
		},
		{
			name: "canceled by a failed parent, never run",
			job: Job{State: StateCanceled, FinishedAt: at(50), DeadReason: ReasonDependencyFailed,
				LastError: "parent job 7 failed"},
			want: []string{"0 submitted", "50 canceled reason=dependency_failed error=parent job 7 failed"},
		},
		{
			name: "completed before migration 014: no token",
			job:  Job{State: StateCompleted, Attempts: 1, WorkerID: "w", StartedAt: at(10), FinishedAt: at(20)},
			want: []string{"0 submitted", "10 leased #1 w=w", "20 completed #1 w=w"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := tc.job
			j.CreatedAt = t0
			if tc.errors != "" {
				j.Errors = decodeErrors(t, tc.errors)
			}
			tl := BuildTimeline(&j, tc.events)
			var got []string
			for _, e := range tl.Entries {
				got = append(got, line(e))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if tc.tries != nil {
				got = nil
				for _, a := range tl.Attempts {
					got = append(got, attemptLine(a))
				}
				if strings.Join(got, "\n") != strings.Join(tc.tries, "\n") {
					t.Errorf("attempts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.tries, "\n"))
				}
			}
			for _, e := range tl.Entries {
				if e.Live && e.LeaseToken != 0 || j.State == StateLeased && e.LeaseToken == j.LeaseToken && j.LeaseToken != 0 {
					t.Errorf("a live lease's token is in the timeline: %s", line(e))
				}
			}
			for _, a := range tl.Attempts {
				if a.Live && a.LeaseToken != 0 {
					t.Errorf("a live lease's token is in the attempts: %s", attemptLine(a))
				}
			}
		})
	}
}

// TestBuildTimelineManyAttempts: 25 failed attempts and a requeue: one
// attempt row and a leased, failed and backoff or dead entry each, in
// time order.
func TestBuildTimelineManyAttempts(t *testing.T) {
	t.Parallel()
	j := Job{CreatedAt: t0, State: StateFailed, Attempts: 25, FinishedAt: at(25 * 60_000), DeadReason: ReasonMaxRetriesExceeded}
	for a := 1; a <= 25; a++ {
		e := AttemptError{Attempt: a, Error: "reset", Reason: ReasonError, WorkerID: fmt.Sprint("w", a%7), At: *at(a * 60_000),
			LeaseToken: int64(1000 + a), StartedAt: at(a*60_000 - 500), NextState: StateRetrying, RetryAt: at(a*60_000 + 1000)}
		if a == 25 {
			e.NextState, e.RetryAt = StateFailed, nil
		}
		j.Errors = append(j.Errors, e)
	}
	tl := BuildTimeline(&j, nil)
	if len(tl.Attempts) != 25 {
		t.Fatalf("%d attempts, want 25", len(tl.Attempts))
	}
	if n := len(tl.Entries); n != 1+25*3 {
		t.Errorf("%d entries, want %d", n, 1+25*3)
	}
	for i := 1; i < len(tl.Entries); i++ {
		if tl.Entries[i].At.Before(tl.Entries[i-1].At) {
			t.Fatalf("entry %d (%s) before entry %d (%s)", i, line(tl.Entries[i]), i-1, line(tl.Entries[i-1]))
		}
	}
	if last := tl.Entries[len(tl.Entries)-1]; last.Kind != EntryDead || last.Reason != ReasonMaxRetriesExceeded {
		t.Errorf("last entry %s, want dead (max_retries_exceeded)", line(last))
	}
}
