package worker

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Job is what a handler receives: one attempt at one job.
type Job struct {
	ID         string          // the job id as the API shows it
	Name       string          // the job type
	Queue      string          // the queue it was submitted to
	Payload    json.RawMessage // the payload exactly as submitted (a JSON value)
	Attempt    int             // 1 for the first attempt
	MaxRetries int             // retries allowed after the first attempt
	WorkerID   string          // the worker running this attempt
	CreatedAt  time.Time       // when the job was submitted
}

// PayloadString returns the payload as a string: the string itself when the
// payload is a JSON string, otherwise its JSON text.
func (j *Job) PayloadString() string {
	var s string
	if err := json.Unmarshal(j.Payload, &s); err == nil {
		return s
	}
	return string(j.Payload)
}

// HandlerFunc runs one attempt of a job. The returned result (any value that
// encodes to JSON, or nil) is stored on success. A returned error fails the
// attempt and the job is retried while retries remain; wrap it with Permanent
// to skip the remaining retries. A panic is recovered and fails the attempt.
// ctx is canceled when the job times out, is canceled, or the worker stops.
type HandlerFunc func(ctx context.Context, job *Job) (result any, err error)

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err so that the job fails at once without further retries.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
