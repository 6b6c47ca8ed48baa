package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dtsched/dts/internal/wire"
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

	progress func(pct int, msg string) // set by the worker that runs the attempt

	// The worker and lease that run the attempt (nil: a Job the worker
	// did not create), and the attempt's logger once asked for (logs.go).
	w            *Worker
	jobID, token int64
	logMu        sync.Mutex
	logger       *slog.Logger
}

// Progress reports how far the attempt has come: pct from 0 to 100 and a
// short message (control characters dropped, cut to 200 characters).
// GET /jobs/{id} shows the latest report as progress and progress_message.
// It never blocks: reports travel on the results stream ahead of the
// attempt's result, at most one a second per attempt (the latest within
// the second wins), and the coordinator records one only while the
// attempt's lease holds. It returns an error when pct is out of range or
// ctx is done, and does nothing on a Job the worker did not create.
func (j *Job) Progress(ctx context.Context, pct int, msg string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if pct < 0 || pct > wire.MaxProgress {
		return fmt.Errorf("progress %d: must be between 0 and %d", pct, wire.MaxProgress)
	}
	if j.progress != nil {
		j.progress(pct, progressMessage(msg))
	}
	return nil
}

// progressMessage makes msg valid UTF-8 without control characters, at most
// wire.MaxProgressMessage characters (what the coordinator accepts).
func progressMessage(msg string) string {
	out := make([]rune, 0, min(len(msg), wire.MaxProgressMessage))
	for _, r := range msg {
		if len(out) == wire.MaxProgressMessage {
			break
		}
		if r == utf8.RuneError || unicode.IsControl(r) {
			continue
		}
		out = append(out, r)
	}
	return string(out)
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
