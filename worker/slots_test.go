package worker

import "testing"

// TestSlotsFIFO: slots go to requests in the order they were made, a
// withdrawn request is skipped, and a withdrawn grant is passed on.
func TestSlotsFIFO(t *testing.T) {
	s := newSlots(1)
	first := s.ask()
	granted := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	if !granted(first) {
		t.Fatal("the first request waits with a slot free")
	}
	a, b, c := s.ask(), s.ask(), s.ask()
	if granted(a) || granted(b) || granted(c) {
		t.Fatal("a request was granted with no slot free")
	}
	s.withdraw(b)
	s.release()
	if !granted(a) || granted(c) {
		t.Fatal("the freed slot did not go to the oldest request")
	}
	s.release()
	if !granted(c) {
		t.Fatal("the withdrawn request was not skipped")
	}
	s.withdraw(c) // granted, then withdrawn: its slot is freed
	if d := s.ask(); !granted(d) {
		t.Fatal("a withdrawn grant's slot was not freed")
	}
}
