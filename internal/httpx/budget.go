package httpx

import (
	"net/http"

	"golang.org/x/sync/semaphore"

	"github.com/dtsched/dts/internal/wire"
)

// BodyBudget bounds the bytes of the request bodies a server works on at
// once. A cap on requests alone does not bound memory: 512 batches of
// 16 MiB each are 8 GiB of bodies, and decoding copies each a few times.
// A request reserves its body's size before the body is read and gives it
// back when it ends.
type BodyBudget struct {
	sem  *semaphore.Weighted
	size int64
}

// NewBodyBudget returns a budget of size bytes; size < 1: no budget (its
// LimitBody is plain LimitBody).
func NewBodyBudget(size int64) *BodyBudget {
	if size < 1 {
		return nil
	}
	return &BodyBudget{sem: semaphore.NewWeighted(size), size: size}
}

// LimitBody is LimitBody(n) that also reserves the body's size from the
// budget for the request's duration: its Content-Length, or n when it has
// none (chunked). A body that does not fit beside the others in progress
// is answered 503 overloaded, with Retry-After: 1, before it is read. A
// body larger than the whole budget (but within n) waits for none and
// runs alone.
func (b *BodyBudget) LimitBody(n int64) func(http.Handler) http.Handler {
	limit := LimitBody(n)
	if b == nil {
		return limit
	}
	return func(next http.Handler) http.Handler {
		inner := limit(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			need := n
			if r.ContentLength >= 0 && r.ContentLength <= n {
				need = r.ContentLength
			}
			need = min(need, b.size)
			if need > 0 {
				if !b.sem.TryAcquire(need) {
					w.Header().Set("Retry-After", "1")
					WriteError(w, r, Errorf(http.StatusServiceUnavailable, wire.CodeOverloaded,
						"too many request bytes in progress (budget %d); retry shortly", b.size))
					return
				}
				defer b.sem.Release(need)
			}
			inner.ServeHTTP(w, r)
		})
	}
}
