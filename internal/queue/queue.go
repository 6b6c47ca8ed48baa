// Package queue is the only code that talks to Redis. Redis is the fast
// transport between processes, never the record: everything here can be
// lost (a flush, a restart) and rebuilt from PostgreSQL, and the coordinator
// is written so that it is (see docs/architecture.md, "Redis keys").
//
// Paths: deliveries go to one list per worker (LPUSH by the coordinator,
// BLMPOP by the worker); results come back on one stream read by a consumer
// group and acknowledged only after PostgreSQL commits; heartbeats travel on
// a second stream; wake-ups on a pub/sub channel. Every batch is one
// pipelined round trip.
package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Queue wraps a Redis client with the scheduler's key layout.
type Queue struct {
	rdb  *redis.Client
	keys Keys
	// resultCodec is how the leader reads results, as the latest delivery
	// said (a worker's side; see wire/codec.go): wire.CodecJSON until a
	// binary one came and after a JSON one, else wire.CodecBinary,
	// wire.CodecBatch or wire.CodecLogs.
	resultCodec atomic.Int32
}

// poolSize is the most connections a process keeps to Redis.
const poolSize = 32

// Sentinel says which sentinels to ask where the Redis master is. The zero
// value means no Sentinel: the URL's host is the server.
type Sentinel struct {
	// Addrs are the sentinels, host:port each. Any one that answers will
	// do; the client learns the others from it.
	Addrs []string
	// Master is the name the sentinels monitor the master under.
	Master string
	// Password is the sentinels' own requirepass. Empty: none. The
	// master's password is the URL's.
	Password string
}

// Open connects to redisURL (redis:// or rediss://) and checks the connection.
func Open(ctx context.Context, redisURL, prefix string) (*Queue, error) {
	return OpenSentinel(ctx, redisURL, prefix, Sentinel{})
}

// OpenSentinel is Open through Redis Sentinel when s names sentinels: the
// client asks them for the master's address on every new connection and
// drops its connections when they announce a failover, so every command
// after a failover goes to the new master. redisURL then gives only the
// master's user, password, database, options and, for rediss://, the name
// its certificate must hold (its host); its host is not dialled.
func OpenSentinel(ctx context.Context, redisURL, prefix string, s Sentinel) (*Queue, error) {
	rdb, err := newClient(redisURL, s)
	if err != nil {
		return nil, err
	}
	q := &Queue{rdb: rdb, keys: Keys{Prefix: prefix}}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		if len(s.Addrs) > 0 {
			return nil, fmt.Errorf("ping redis master %q through sentinels %s: %w", s.Master, strings.Join(s.Addrs, ","), err)
		}
		return nil, fmt.Errorf("ping redis: %w", err)
	}
	return q, nil
}

func newClient(redisURL string, s Sentinel) (*redis.Client, error) {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	opt.PoolSize = poolSize
	if len(s.Addrs) == 0 {
		return redis.NewClient(opt), nil
	}
	if s.Master == "" {
		return nil, errors.New("redis sentinel: no master name")
	}
	// Every field redis.ParseURL may set, but Addr.
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:       s.Master,
		SentinelAddrs:    s.Addrs,
		SentinelPassword: s.Password,

		Username:   opt.Username,
		Password:   opt.Password,
		DB:         opt.DB,
		Protocol:   opt.Protocol,
		ClientName: opt.ClientName,
		TLSConfig:  opt.TLSConfig,

		MaxRetries:      opt.MaxRetries,
		MinRetryBackoff: opt.MinRetryBackoff,
		MaxRetryBackoff: opt.MaxRetryBackoff,
		DialTimeout:     opt.DialTimeout,
		ReadTimeout:     opt.ReadTimeout,
		WriteTimeout:    opt.WriteTimeout,

		PoolFIFO:                opt.PoolFIFO,
		PoolSize:                opt.PoolSize,
		PoolTimeout:             opt.PoolTimeout,
		MinIdleConns:            opt.MinIdleConns,
		MaxIdleConns:            opt.MaxIdleConns,
		MaxActiveConns:          opt.MaxActiveConns,
		MaxConcurrentDials:      opt.MaxConcurrentDials,
		PipelinePoolSize:        opt.PipelinePoolSize,
		PipelineReadBufferSize:  opt.PipelineReadBufferSize,
		PipelineWriteBufferSize: opt.PipelineWriteBufferSize,
		ConnMaxIdleTime:         opt.ConnMaxIdleTime,
		ConnMaxLifetime:         opt.ConnMaxLifetime,
		ConnMaxLifetimeJitter:   opt.ConnMaxLifetimeJitter,
	}), nil
}

// Close closes the client.
func (q *Queue) Close() error { return q.rdb.Close() }

// Keys returns the key layout.
func (q *Queue) Keys() Keys { return q.keys }

// Ping checks that Redis answers.
func (q *Queue) Ping(ctx context.Context) error { return q.rdb.Ping(ctx).Err() }

// heartbeatStreamLen bounds the heartbeat stream (approximately).
const heartbeatStreamLen = 10_000

// ---- helpers ----

// noBlockIfZero maps a wait under a millisecond to go-redis's "no BLOCK
// argument" (-1): go-redis sends BLOCK in whole milliseconds, and BLOCK 0
// is Redis's "wait forever".
func noBlockIfZero(block time.Duration) time.Duration {
	if block < time.Millisecond {
		return -1
	}
	return block
}

func field(values map[string]any, name string) []byte {
	switch v := values[name].(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	}
	return nil
}
