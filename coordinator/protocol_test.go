package coordinator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// TestUnsupportedProtocolGetsNoJobs: a worker whose heartbeats announce a
// protocol version this coordinator does not speak is registered (GET
// /workers shows it, its version and why it gets nothing, and the log says
// so once as it joins) but is leased no job; a worker that does not say
// (version 1) and one that announces ProtocolVersion get every job.
func TestUnsupportedProtocolGetsNoJobs(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var logs syncBuffer
	r.b.log = slog.New(slog.NewTextHandler(&logs, nil))
	r.start(r.heartbeatReader())

	// Raw JSON, as a worker in another language would send it.
	beat := func(id, protocol string) {
		hb := fmt.Sprintf(`{"worker_id":%q,"job_types":["*"],"concurrency":50,"in_flight":[],"sent_at":"2026-01-01T00:00:00Z"%s}`, id, protocol)
		if err := r.rdb.XAdd(r.ctx, &redis.XAddArgs{Stream: r.keys.Heartbeats(), Values: []any{"h", hb}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	newer := wire.ProtocolVersion + 1
	testwait.For(t, 10*time.Second, "the three workers registered", func() bool {
		beat("old", "")
		beat("current", fmt.Sprintf(`,"protocol":%d`, wire.ProtocolVersion))
		beat("newer", fmt.Sprintf(`,"protocol":%d`, newer))
		return len(r.b.l.workers.Snapshot()) == 3
	})
	if r.b.l.workers.Usable("newer") || !r.b.l.workers.Usable("old") || !r.b.l.workers.Usable("current") {
		t.Error("usable: want old and current, not newer")
	}

	ps := make([]store.JobInsertParams, 20)
	for i := range ps {
		ps[i] = store.JobInsertParams{Name: "x", Payload: json.RawMessage(`null`)}
	}
	if _, err := r.store.JobInsert(r.ctx, ps); err != nil {
		t.Fatal(err)
	}
	d := &dispatcher{base: r.b, store: r.store, queue: r.queue}
	if _, err := d.roundDelivered(r.ctx, scopeAll); err != nil {
		t.Fatal(err)
	}
	leased := map[string]int{}
	rows, err := r.db.Query(r.ctx, `SELECT worker_id, count(*) FROM jobs WHERE status = 'leased' GROUP BY worker_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		leased[id] = n
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if leased["newer"] != 0 || leased["old"]+leased["current"] != len(ps) {
		t.Errorf("leased by worker: %v; want all %d to old and current, none to newer", leased, len(ps))
	}

	c := &Coordinator{cfg: r.b.cfg, log: r.b.log, reg: newRegistry(), auth: &authState{}, leading: r.b.l}
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/workers", nil))
	var body struct {
		Workers []struct {
			ID            string `json:"worker_id"`
			State         string `json:"state"`
			Protocol      int    `json:"protocol"`
			ProtocolError string `json:"protocol_error"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("GET /workers = %d %v: %s", rec.Code, err, rec.Body)
	}
	for _, w := range body.Workers {
		switch w.ID {
		case "newer":
			if w.Protocol != newer || w.State != "draining" || !strings.Contains(w.ProtocolError, fmt.Sprint(newer)) {
				t.Errorf("GET /workers shows the newer worker as %+v; want protocol %d, draining, and why", w, newer)
			}
		default:
			if w.Protocol != wire.ProtocolVersion || w.ProtocolError != "" {
				t.Errorf("GET /workers shows %+v; want protocol %d and no error", w, wire.ProtocolVersion)
			}
		}
	}
	n := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "worker_id=newer") && strings.Contains(line, fmt.Sprintf("protocol=%d", newer)) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d log lines name the newer worker's protocol; want 1:\n%s", n, logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
