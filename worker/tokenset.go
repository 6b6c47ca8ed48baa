package worker

// remembered bounds the lease tokens a worker remembers beyond those it
// holds: tokens delivered lately and tokens canceled before delivery.
const remembered = 10_000

// tokenSet holds the last n lease tokens added.
type tokenSet struct {
	has  map[int64]bool
	ring []int64
	next int
}

func newTokenSet(n int) tokenSet {
	return tokenSet{has: make(map[int64]bool, n), ring: make([]int64, 0, n)}
}

func (s *tokenSet) add(token int64) {
	if len(s.ring) < cap(s.ring) {
		s.ring = append(s.ring, token)
	} else {
		delete(s.has, s.ring[s.next])
		s.ring[s.next] = token
		s.next = (s.next + 1) % len(s.ring)
	}
	s.has[token] = true
}
