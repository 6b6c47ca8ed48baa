package queue

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/wire"
)

// ---- dead-letter list ----

// PushDead prepends entries to the dead-letter list.
func (q *Queue) PushDead(ctx context.Context, es []wire.DeadEntry) error {
	if len(es) == 0 {
		return nil
	}
	vals := make([]any, len(es))
	for i := range es {
		b, err := json.Marshal(&es[i])
		if err != nil {
			return fmt.Errorf("encode dead entry: %w", err)
		}
		vals[i] = b
	}
	if err := q.rdb.LPush(ctx, q.keys.DeadLetter(), vals...).Err(); err != nil {
		return fmt.Errorf("push dead entries: %w", err)
	}
	return nil
}

// DeadLen returns the dead-letter list's length.
func (q *Queue) DeadLen(ctx context.Context) (int64, error) {
	n, err := q.rdb.LLen(ctx, q.keys.DeadLetter()).Result()
	if err != nil {
		return 0, fmt.Errorf("dead-letter length: %w", err)
	}
	return n, nil
}

// DeadEntries returns the dead-letter list's entries, newest first.
func (q *Queue) DeadEntries(ctx context.Context, max int) ([]wire.DeadEntry, error) {
	vals, err := q.rdb.LRange(ctx, q.keys.DeadLetter(), 0, int64(max-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("read dead-letter list: %w", err)
	}
	out := make([]wire.DeadEntry, 0, len(vals))
	for _, v := range vals {
		var e wire.DeadEntry
		if err := json.Unmarshal([]byte(v), &e); err == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// The dead-letter mirror is rebuilt page by page, so that neither the
// coordinator nor one Redis command holds it whole: DeadRebuildStart,
// DeadRebuildAppend for each page (newest first), then DeadRebuildFinish,
// which swaps the new list in.

// DeadRebuildStart clears the temporary list a rebuild writes to.
func (q *Queue) DeadRebuildStart(ctx context.Context) error {
	if err := q.rdb.Del(ctx, q.keys.DeadLetterRebuild()).Err(); err != nil {
		return fmt.Errorf("start dead-letter rebuild: %w", err)
	}
	return nil
}

// DeadRebuildAppend appends one page of entries to the rebuild.
func (q *Queue) DeadRebuildAppend(ctx context.Context, es []wire.DeadEntry) error {
	if len(es) == 0 {
		return nil
	}
	vals := make([]any, len(es))
	for i := range es {
		b, err := json.Marshal(&es[i])
		if err != nil {
			return fmt.Errorf("encode dead entry: %w", err)
		}
		vals[i] = b
	}
	if err := q.rdb.RPush(ctx, q.keys.DeadLetterRebuild(), vals...).Err(); err != nil {
		return fmt.Errorf("append to dead-letter rebuild: %w", err)
	}
	return nil
}

// deadSwapScript puts a rebuilt dead-letter list in place, unless a
// leader of a later epoch has already rebuilt it.
//
//	KEYS[1]  the temporary list (dead_letter_queue:rebuild)
//	KEYS[2]  the dead-letter list
//	KEYS[3]  the epoch of the leader that last rebuilt it
//	ARGV[1]  this leader's epoch
//
// Returns 1 when swapped, 0 when a later epoch's rebuild stands.
var deadSwapScript = redis.NewScript(`
local last = tonumber(redis.call('GET', KEYS[3]) or '0')
if last > tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('SET', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('RENAME', KEYS[1], KEYS[2])
else
  redis.call('DEL', KEYS[2])
end
return 1
`)

// DeadRebuildFinish replaces the dead-letter list with the rebuilt one in
// one step. A leader whose epoch is older than the last rebuilder's changes
// nothing and gets job.ErrDeposed.
func (q *Queue) DeadRebuildFinish(ctx context.Context, epoch int64) error {
	k := q.keys
	n, err := deadSwapScript.Run(ctx, q.rdb, []string{k.DeadLetterRebuild(), k.DeadLetter(), k.DeadLetterEpoch()}, epoch).Int()
	if err != nil {
		return fmt.Errorf("finish dead-letter rebuild: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("finish dead-letter rebuild: %w", job.ErrDeposed)
	}
	return nil
}
