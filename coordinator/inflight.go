package coordinator

// inFlight runs one background task at a time for a loop that must not
// wait for it (a delivery, an acknowledgement: a round trip to Redis) but
// must not start the next before it is done, and must see how it ended.
// The loop's own goroutine calls start and wait; the zero value is idle.
type inFlight struct {
	done chan struct{} // closed when the task in flight returned; nil: none
	err  error         // the task's error, read once done is closed
}

// start waits for the task in flight, then runs task in the background.
// It returns the error of the task it waited for.
func (f *inFlight) start(task func() error) error {
	err := f.wait()
	done := make(chan struct{})
	f.done = done
	go func() {
		defer close(done)
		f.err = task()
	}()
	return err
}

// wait waits for the task in flight, if any, and returns its error.
func (f *inFlight) wait() error {
	if f.done == nil {
		return nil
	}
	<-f.done
	f.done = nil
	err := f.err
	f.err = nil
	return err
}
