package worker

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/wire"
)

// TestReceiveBoundedByBytes: once a worker has seen how large its
// deliveries are, it pops about receiveBytes of them at a time, not a
// slot's worth each: Redis builds a reply whole before it serves anyone
// else, and a thousand large payloads in one reply held up every other
// worker's heartbeats. The worker's own Redis (its slow log records every
// command with its arguments) shows the COUNT of each pop.
func TestReceiveBoundedByBytes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opt, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()
	for _, kv := range [][2]string{{"slowlog-log-slower-than", "0"}, {"slowlog-max-len", "100000"}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}

	const slots = 200
	w := newTestWorker(t, srv.URL(), "rb", Config{Concurrency: slots})
	w.Handle("big", func(context.Context, *Job) (any, error) { return nil, nil })
	c := newCoordinator(t, srv.URL(), "rb", w.ID())
	r := run(t, w)
	defer r.stop(t)
	payload := json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`) // 1 MiB
	big := func(id int64) wire.Delivery {
		d := delivery(id, 1000+id, "big", 1)
		d.Payload = payload
		return d
	}
	c.deliver(big(1)) // the worker learns the size
	c.results(1)
	if err := rdb.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var ds []wire.Delivery
	for id := int64(2); id <= 61; id++ {
		ds = append(ds, big(id))
	}
	c.deliver(ds...)
	c.results(len(ds))

	logs, err := rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	pops := 0
	for _, l := range logs {
		cmd := strings.ToLower(l.Args[0])
		if cmd != "blmpop" && cmd != "lmpop" {
			continue
		}
		pops++
		for i, a := range l.Args {
			if strings.EqualFold(a, "count") && i+1 < len(l.Args) {
				n, _ := strconv.Atoi(l.Args[i+1])
				if n > receiveBytes>>20+1 {
					t.Errorf("a pop asked for %d deliveries of 1 MiB, want at most %d: %v", n, receiveBytes>>20+1, l.Args)
				}
			}
		}
	}
	if pops == 0 {
		t.Fatal("the slow log holds no pop")
	}
}
