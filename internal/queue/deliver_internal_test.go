package queue

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/wire"
)

// pushRecorder records the bytes of every LPUSH a client pipelines.
type pushRecorder struct {
	mu     sync.Mutex
	pushes []int // bytes of values per LPUSH, in order
}

func (r *pushRecorder) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (r *pushRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (r *pushRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.mu.Lock()
		for _, c := range cmds {
			if c.Name() != "lpush" {
				continue
			}
			n := 0
			for _, a := range c.Args()[2:] {
				n += len(a.([]byte))
			}
			r.pushes = append(r.pushes, n)
		}
		r.mu.Unlock()
		return next(ctx, cmds)
	}
}

// TestDeliverSplitsLargePushes: a worker's share of a round goes to Redis
// in LPUSHes of at most maxPushBytes (or one delivery), in order. Redis
// copies a command whole before it serves anyone else, so a round of large
// payloads in one command held up every heartbeat and result meanwhile.
func TestDeliverSplitsLargePushes(t *testing.T) {
	t.Parallel()
	q, err := Open(t.Context(), redistest.URL(), redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	rec := &pushRecorder{}
	q.rdb.AddHook(rec)

	big := json.RawMessage(`"` + strings.Repeat("x", 3<<20) + `"`)   // 3 MiB: one per push
	mid := json.RawMessage(`"` + strings.Repeat("y", 700<<10) + `"`) // 700 KiB: five per push
	var ds []wire.Delivery
	for i := int64(1); i <= 14; i++ {
		p := mid
		if i <= 3 {
			p = big
		}
		ds = append(ds, wire.Delivery{JobID: i, Name: "j", Queue: "default", Payload: p, Attempt: 1,
			LeaseToken: 100 + i, CreatedAt: time.Unix(1, 0).UTC()})
	}
	if err := q.Deliver(t.Context(), map[string]Outbox{"w": {Deliveries: ds, Codec: wire.CodecTrace}}); err != nil {
		t.Fatal(err)
	}
	if len(rec.pushes) < 5 {
		t.Errorf("%d LPUSHes of %v bytes for 3 × 3 MiB and 11 × 700 KiB, want at least 5", len(rec.pushes), rec.pushes)
	}
	for i, n := range rec.pushes {
		if n > maxPushBytes && n > len(big)+256 {
			t.Errorf("LPUSH %d carried %d bytes, more than %d and one delivery", i, n, maxPushBytes)
		}
	}
	var got []int64
	for len(got) < len(ds) {
		in, err := q.Receive(t.Context(), "w", 100, 0)
		if err != nil || len(in.Deliveries) == 0 {
			t.Fatalf("receive after %d: %+v %v", len(got), in, err)
		}
		for _, d := range in.Deliveries {
			got = append(got, d.JobID)
		}
	}
	for i, id := range got {
		if id != int64(i+1) {
			t.Fatalf("received jobs %v, want 1 to 14 in order", got)
		}
	}
}
