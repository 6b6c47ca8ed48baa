package queue

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/wire"
)

// ---- wake-ups ----

// Wake tells the coordinator new jobs are due. Best effort. w.Limited says
// some of them may have a limit_key: the leader's dispatcher runs its
// limited claim only while it knows such jobs wait, and would otherwise
// learn of them at its next reload (a poll interval later). w.Names, when
// not nil, are the names of the jobs: the dispatcher then claims for the
// worker groups that handle them and for those whose last claim found
// jobs, not for every group (wire.Wake has the payload).
func (q *Queue) Wake(ctx context.Context, w wire.Wake) error {
	return q.rdb.Publish(ctx, q.keys.Wakeup(), wire.FormatWake(w)).Err()
}

// wakeCheck is how long the wake-up subscription may stay silent before
// it pings Redis, so that a connection that died without a word is found
// and replaced (the next receive reconnects and subscribes again).
const wakeCheck = 3 * time.Second

// SubscribeWake returns a channel that receives a value per wake-up and a
// function to stop listening. Wake-ups that come while one is pending are
// merged into it (wire.Wake.Merge).
//
// One goroutine reads the subscription and signals the channel. go-redis's
// Channel would add two more per message (one forwards it, one resets the
// health check's timer), each a wake-up of a parked goroutine, a cost
// paid per submission (docs/benchmarks.md). The health check is kept: a
// silent wakeCheck
// sends a PING.
func (q *Queue) SubscribeWake(ctx context.Context) (<-chan wire.Wake, func()) {
	sub := q.rdb.Subscribe(ctx, q.keys.Wakeup())
	out := make(chan wire.Wake, 1)
	closed := make(chan struct{})
	go func() {
		for {
			msg, err := sub.ReceiveTimeout(context.Background(), wakeCheck)
			var nerr interface{ Timeout() bool }
			switch {
			case err == nil:
			case errors.Is(err, redis.ErrClosed):
				return
			case errors.As(err, &nerr) && nerr.Timeout():
				_ = sub.Ping(context.Background()) // a failure makes the next receive reconnect
				continue
			default: // Redis away: the next receive reconnects; not in a busy loop
				select {
				case <-closed:
					return
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			if m, ok := msg.(*redis.Message); ok {
				mergeWake(out, wire.ParseWake(m.Payload))
			}
		}
	}()
	var once sync.Once
	return out, func() {
		once.Do(func() {
			close(closed)
			_ = sub.Close()
		})
	}
}

// mergeWake puts a wake-up on out (capacity 1, one sender: the caller),
// merged with the one pending there if any: one pending wake-up is as
// good as many (wire.Wake.Merge).
func mergeWake(out chan wire.Wake, w wire.Wake) {
	for {
		select {
		case out <- w:
			return
		default:
		}
		select {
		case pending := <-out:
			w = w.Merge(pending)
		default: // the receiver took it meanwhile: send again
		}
	}
}
