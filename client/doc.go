// Package client submits and manages dts jobs over the submitter's HTTP API
// (docs/api.md). It is the Go client for programs that enqueue work and the
// one dtsctl uses:
//
//	c, err := client.New(client.Config{BaseURL: "http://127.0.0.1:8000", Token: os.Getenv("DTS_TOKEN")})
//	sub, err := c.Submit(ctx, "send_email", map[string]string{"to": "a@example.com"}, client.MaxRetries(5))
//	job, err := c.Wait(ctx, sub.JobID) // until completed, failed or canceled
//
// Submit options cover every field of a submission: the queue, priority,
// retries and timing, IdempotencyKey, DependsOn (and DependsOnIndex within
// SubmitBatch; SubmitBatchCallback adds a batch callback), and Unique,
// UniqueStates and UniqueKey, which make a repeat inside a window answer the
// first job (SubmitResult says whether the job was created). Progress reads
// what a running job's handler last reported. The schedule calls
// (CreateSchedule, Schedules, Schedule, PauseSchedule, ResumeSchedule,
// DeleteSchedule, TriggerSchedule) manage periodic jobs; the admin calls
// (Delete, Bulk, tokens, audit) need a token with the admin scope.
//
// It imports only the standard library and internal/wire, the API's own
// request, response and error-code definitions, so the client cannot drift
// from the server. The wire types are re-exported as aliases (Job, Submitted,
// Stats, ...): a program outside this repository may not import
// internal/wire itself, but it can name client.Job.
//
// Every 4xx and 5xx answer becomes an *Error carrying the API's stable code;
// errors.Is(err, client.ErrNotFound) tests it. Answers that say "try again"
// (429, and 503 with a code that guarantees nothing was written) are retried
// after Retry-After, a bounded number of times; see Config.
package client
