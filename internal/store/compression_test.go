package store_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/store"
)

// TestLargePayloadsUseLZ4: a large payload and result are compressed with
// lz4, not pglz, which took about twice as long to store an
// incompressible 1 MiB payload and is slower to read back.
func TestLargePayloadsUseLZ4(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	big := json.RawMessage(`"` + strings.Repeat("compressible ", 20000) + `"`)
	id := e.insert(t, store.JobInsertParams{Name: "x", Payload: big})[0]
	e.exec(t, `UPDATE jobs SET result = payload WHERE id = $1`, id)
	var payload, result string
	e.scalar(t, &payload, `SELECT coalesce(pg_column_compression(payload), 'none') FROM jobs WHERE id = $1`, id)
	e.scalar(t, &result, `SELECT coalesce(pg_column_compression(result), 'none') FROM jobs WHERE id = $1`, id)
	if payload != "lz4" || result != "lz4" {
		t.Errorf("payload compressed with %s, result with %s; want lz4", payload, result)
	}
	if j := e.get(t, id); !jsonEqual(t, j.Payload, big) {
		t.Error("the payload did not read back as written")
	}
}
