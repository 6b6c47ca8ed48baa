package httpx

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/wire"
)

// RateLimiter is a set of token buckets, one per key (a token, or a client
// IP), each refilled at the same rate. It is safe for concurrent use.
//
// Its memory is bounded: a bucket unused for as long as it takes to refill
// completely is indistinguishable from a new one, so it is dropped at the
// next sweep; and if there are still more than maxBuckets, all are dropped
// (losing at most one burst per key).
type RateLimiter struct {
	limit rate.Limit
	burst int
	idle  time.Duration // a bucket unused this long is full again
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time

	// lookups lets the token checks of an address out of its budget of
	// failures (CheckToken) run one at a time, across every front end
	// that shares this limiter.
	lookups *gate
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// maxBuckets bounds the buckets kept between sweeps.
const maxBuckets = 100_000

// sweepEvery is how often idle buckets are dropped.
const sweepEvery = time.Minute

// NewRateLimiter returns buckets refilled at rps tokens a second and
// holding at most burst. now is the clock (nil: time.Now).
func NewRateLimiter(rps float64, burst int, now func() time.Time) *RateLimiter {
	if now == nil {
		now = time.Now
	}
	idle := time.Duration(float64(burst)/rps*float64(time.Second)) + time.Second
	return &RateLimiter{limit: rate.Limit(rps), burst: burst, idle: idle, now: now,
		buckets: map[string]*bucket{}, lastSweep: now(), lookups: newGate()}
}

func (l *RateLimiter) get(key string, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= sweepEvery || len(l.buckets) >= maxBuckets {
		l.lastSweep = now
		for k, b := range l.buckets {
			if now.Sub(b.seen) > l.idle {
				delete(l.buckets, k)
			}
		}
		if len(l.buckets) >= maxBuckets {
			clear(l.buckets)
		}
	}
	b, ok := l.buckets[key]
	if !ok {
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[key] = b
	}
	b.seen = now
	return b.lim
}

// Allow takes a token from key's bucket. If there is none it takes nothing
// and returns how long until there will be one.
func (l *RateLimiter) Allow(key string) (bool, time.Duration) {
	now := l.now()
	r := l.get(key, now).ReserveN(now, 1)
	if !r.OK() { // burst < 1: nothing ever passes
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// Blocked reports, without taking a token, whether key's bucket is empty,
// and if so how long until it holds one again.
func (l *RateLimiter) Blocked(key string) (time.Duration, bool) {
	now := l.now()
	tokens := l.get(key, now).TokensAt(now)
	if tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - tokens) / float64(l.limit) * float64(time.Second)), true
}

// gate lets one caller at a time in per key. Its memory is bounded by the
// callers inside or waiting: a key's entry goes when its last one leaves.
type gate struct {
	mu   sync.Mutex
	keys map[string]*gateKey
}

type gateKey struct {
	slot  chan struct{} // holds a value while someone is inside
	users int           // inside or waiting
}

func newGate() *gate { return &gate{keys: map[string]*gateKey{}} }

// enter waits until no one else is inside for key, or ctx is done. On
// success the caller must call release once.
func (g *gate) enter(ctx context.Context, key string) (release func(), err error) {
	g.mu.Lock()
	k := g.keys[key]
	if k == nil {
		k = &gateKey{slot: make(chan struct{}, 1)}
		g.keys[key] = k
	}
	k.users++
	g.mu.Unlock()
	leave := func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if k.users--; k.users == 0 {
			delete(g.keys, key)
		}
	}
	select {
	case k.slot <- struct{}{}:
		return func() { <-k.slot; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// RateLimit answers 429 rate_limited, with Retry-After, to a caller over
// its rate. The caller is its token (auth.Principal.RateKey), or its client
// IP when auth is off. Put it inside Authenticate.
func RateLimit(l *RateLimiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := PrincipalFrom(r.Context())
			key := p.RateKey
			if p.Kind == auth.KindAnonymous || key == "" {
				key = "ip:" + ClientIP(r)
			}
			if ok, wait := l.Allow(key); !ok {
				rateLimited(w, r, wait, "rate limit exceeded")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// rateLimited answers 429 with Retry-After in whole seconds (at least 1).
func rateLimited(w http.ResponseWriter, r *http.Request, wait time.Duration, msg string) {
	secs := max(int64(math.Ceil(wait.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	WriteError(w, r, Errorf(http.StatusTooManyRequests, wire.CodeRateLimited, "%s; retry in %d s", msg, secs))
}

// LimitConcurrency answers 503 overloaded, with Retry-After: 1, when n
// requests are in progress already, instead of queueing more work than the
// server (and its database pool) can take. n < 1 means no limit.
func LimitConcurrency(n int) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if n < 1 {
			return next
		}
		sem := make(chan struct{}, n)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
				next.ServeHTTP(w, r)
			default:
				w.Header().Set("Retry-After", "1")
				WriteError(w, r, Errorf(http.StatusServiceUnavailable, wire.CodeOverloaded,
					"too many requests in progress (%d); retry shortly", n))
			}
		})
	}
}
