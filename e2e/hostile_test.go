package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// TestWorkerCannotForgeResults: a worker that knows its own lease (job id
// and token) tries to complete another worker's job: with tokens near its
// own, and with that job's real token under its own name. Nothing is
// applied: tokens are random 63-bit numbers, and every lease statement also
// matches the lease's worker.
func TestWorkerCannotForgeResults(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c1 := c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1")
	c.startWorker("w2")
	c.eventually(10*time.Second, "both workers registered", func() bool {
		_, out := c.do("GET", c1.url+"/workers", nil)
		ws, _ := out["workers"].([]any)
		return len(ws) == 2
	})
	a := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 30}})
	b := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 30}})
	c.waitStatus(a, "leased", 20*time.Second)
	c.waitStatus(b, "leased", 20*time.Second)

	ctx := ctxT(t, time.Minute)
	conn, err := pgx.Connect(ctx, c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	type lease struct {
		id     int64
		token  int64
		worker string
	}
	get := func(id string) lease {
		n, _ := strconv.ParseInt(id, 10, 64)
		l := lease{id: n}
		if err := conn.QueryRow(ctx, `SELECT lease_token, worker_id FROM jobs WHERE id = $1`, n).Scan(&l.token, &l.worker); err != nil {
			t.Fatal(err)
		}
		return l
	}
	la, lb := get(a), get(b)
	if la.worker == lb.worker {
		t.Fatalf("both jobs went to %s; the test needs one on each worker", la.worker)
	}
	// The hostile worker is lb's; its target is la's job.
	rdb := redis.NewClient(&redis.Options{Addr: c.redis.Addr()})
	defer rdb.Close()
	forge := func(token int64, worker string) {
		r := fmt.Sprintf(`{"job_id":%d,"lease_token":%d,"worker_id":%q,"attempt":1,"outcome":"completed","result":"forged",`+
			`"started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01Z"}`, la.id, token, worker)
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "dts:results", Values: []any{"r", r}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for d := int64(-3); d <= 3; d++ {
		forge(lb.token+d, lb.worker)
	}
	forge(la.token, lb.worker) // the real token, under the wrong name
	c.eventually(10*time.Second, "the forged results to be read", func() bool {
		n, _ := rdb.XLen(ctx, "dts:results").Result()
		return n == 0
	})
	if j := c.job(a); j["status"] != "leased" || j["result"] != nil {
		t.Fatalf("the victim's job is %v with result %v; want it still leased, untouched", j["status"], j["result"])
	}
	if n := c.metric(c1.url, "dts_stale_results_total", ""); n < 8 {
		t.Errorf("dts_stale_results_total = %v, want the 8 forged results counted", n)
	}
}
