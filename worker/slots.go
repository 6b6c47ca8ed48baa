package worker

import "sync"

// slots hands out the worker's Concurrency slots in the order the attempts
// asked for them, which is delivery order: a prefetched job starts before
// one delivered after it. (A buffered channel as a semaphore would let the
// waiting goroutines race for a freed slot.)
type slots struct {
	mu      sync.Mutex
	free    int
	waiting []chan struct{} // FIFO; each is closed when it gets a slot
}

func newSlots(n int) *slots { return &slots{free: n} }

// ask queues a request for a slot and returns a channel that is closed
// when the slot is granted (at once if one is free and nobody waits).
func (s *slots) ask() chan struct{} {
	ch := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free > 0 && len(s.waiting) == 0 {
		s.free--
		close(ch)
		return ch
	}
	s.waiting = append(s.waiting, ch)
	return ch
}

// withdraw gives up a request: it leaves the queue, or, if it was granted
// meanwhile, its slot is released.
func (s *slots) withdraw(ch chan struct{}) {
	s.mu.Lock()
	for i, w := range s.waiting {
		if w == ch {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			s.mu.Unlock()
			return
		}
	}
	s.mu.Unlock()
	s.release() // granted after all
}

// release frees a slot: the first waiting request gets it.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) > 0 {
		ch := s.waiting[0]
		s.waiting = s.waiting[1:]
		close(ch)
		return
	}
	s.free++
}
