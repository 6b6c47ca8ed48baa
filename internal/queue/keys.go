package queue

// Keys builds every Redis key and channel name the scheduler uses. Prefix
// namespaces them all (tests give each test its own; production leaves it
// empty so the DLQ list keeps its historical name, dead_letter_queue).
type Keys struct {
	Prefix string
}

// WorkerJobs is worker id's delivery list: the coordinator LPUSHes leased
// jobs (wire.Delivery JSON), the worker pops from the right (FIFO).
func (k Keys) WorkerJobs(id string) string { return k.Prefix + "dts:worker:" + id + ":jobs" }

// WorkerControl is worker id's control list (wire.Control JSON: cancel).
// The worker pops it before its job list.
func (k Keys) WorkerControl(id string) string { return k.Prefix + "dts:worker:" + id + ":control" }

// Results is the stream of attempt outcomes (wire.Result JSON in field "r"),
// read by the coordinators' consumer group ResultsGroup.
func (k Keys) Results() string { return k.Prefix + "dts:results" }

// Heartbeats is the stream of worker heartbeats (wire.Heartbeat JSON in field "h").
func (k Keys) Heartbeats() string { return k.Prefix + "dts:heartbeats" }

// Wakeup is the pub/sub channel on which submitters tell the coordinator
// that new jobs are due. Losing a message only delays dispatch to the next poll.
func (k Keys) Wakeup() string { return k.Prefix + "dts:wakeup" }

// DeadLetter is the dead-letter list: one JSON entry per failed job
// (wire.DeadEntry), newest at the head. A mirror of PostgreSQL's failed jobs.
func (k Keys) DeadLetter() string { return k.Prefix + "dead_letter_queue" }

// DeadLetterRebuild is the temporary list a rebuild of the dead-letter
// mirror writes before it is renamed over DeadLetter.
func (k Keys) DeadLetterRebuild() string { return k.Prefix + "dead_letter_queue:rebuild" }

// DeadLetterEpoch holds the epoch of the leader that last rebuilt the
// dead-letter mirror (a deposed leader's rebuild is not swapped in).
func (k Keys) DeadLetterEpoch() string { return k.Prefix + "dead_letter_queue:epoch" }

// ResultsGroup is the consumer group of coordinators on the results stream.
const ResultsGroup = "coordinators"
