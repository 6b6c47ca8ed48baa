package queue_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/wire"
)

// TestResultLogsByLeaderCodec: a worker's queue sends a result's logs in
// a binary batch only once a delivery says its leader reads them
// (wire.LogsMagic); after a delivery from a leader that reads batches but
// not logs it leaves them out, so that leader does not refuse the batch;
// in JSON it keeps them (unknown fields are ignored). The reader bounds
// what it gets: a line over wire.MaxLogLineBytes is cut.
func TestResultLogsByLeaderCodec(t *testing.T) {
	t.Parallel()
	e, worker := newResultsEnv(t)
	ctx := t.Context()
	withLogs := result(1, wire.OutcomeCompleted)
	withLogs.Logs = &wire.Logs{Dropped: 2, Lines: []wire.LogLine{
		{Time: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC), Level: "INFO", Message: "hello n=1"},
		{Time: time.Date(2026, 5, 1, 12, 0, 1, 0, time.UTC), Level: "WARN", Message: strings.Repeat("x", wire.MaxLogLineBytes+10)},
	}}
	for _, c := range []struct {
		codec    int
		wantLogs bool
	}{{wire.CodecLogs, true}, {wire.CodecBatch, false}, {wire.CodecJSON, true}} {
		if err := e.q.Deliver(ctx, outbox(c.codec, map[string][]wire.Delivery{"w": {delivery(9)}})); err != nil {
			t.Fatal(err)
		}
		if in := worker.receive(t, "w", 10); len(in.Deliveries) != 1 || in.Bad != 0 {
			t.Fatalf("delivery in codec %d received as %+v", c.codec, in)
		}
		if err := worker.q.SendResults(ctx, []wire.Result{withLogs}); err != nil {
			t.Fatal(err)
		}
		got, bad, err := e.q.ReadResults(ctx, false, 10, 0)
		if err != nil || len(bad) != 0 || len(got) != 1 {
			t.Fatalf("codec %d: read %d results, bad %v, %v", c.codec, len(got), bad, err)
		}
		l := got[0].Result.Logs
		if !c.wantLogs {
			if l != nil {
				t.Errorf("codec %d: logs %+v reached a leader that does not read them", c.codec, l)
			}
			continue
		}
		if l == nil || l.Dropped != 2 || len(l.Lines) != 2 || l.Lines[0].Message != "hello n=1" ||
			len(l.Lines[1].Message) != wire.MaxLogLineBytes || !l.Lines[0].Time.Equal(withLogs.Logs.Lines[0].Time) {
			t.Errorf("codec %d: logs read back as %+v", c.codec, l)
		}
	}
}
