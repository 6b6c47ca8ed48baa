package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dtsched/dts/client"
)

func (a *app) submitCmd() *cobra.Command {
	var payload, payloadFile, queue, runAt, key, concurrencyKey string
	var priority, retries int
	var delay, timeout time.Duration
	var wait bool
	cmd := &cobra.Command{
		Use:   "submit NAME",
		Short: "Submit a job",
		Example: `  dtsctl submit send_email --payload '{"to":"a@example.com"}' --max-retries 5
  dtsctl submit report --payload-file req.json --run-at 2030-01-02T15:04:05Z -q
  dtsctl submit sleep --payload 2 --wait`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			body, err := a.readPayload(payload, payloadFile)
			if err != nil {
				return err
			}
			var opts []client.Option
			f := cmd.Flags()
			if queue != "" {
				opts = append(opts, client.Queue(queue))
			}
			if concurrencyKey != "" {
				opts = append(opts, client.ConcurrencyKey(concurrencyKey))
			}
			if f.Changed("priority") {
				opts = append(opts, client.Priority(priority))
			}
			if f.Changed("max-retries") {
				opts = append(opts, client.MaxRetries(retries))
			}
			if f.Changed("delay") {
				opts = append(opts, client.Delay(delay))
			}
			if f.Changed("timeout") {
				opts = append(opts, client.Timeout(timeout))
			}
			if runAt != "" {
				t, err := time.Parse(time.RFC3339Nano, runAt)
				if err != nil {
					return usagef("--run-at: not an RFC 3339 time")
				}
				opts = append(opts, client.RunAt(t))
			}
			if key != "" {
				opts = append(opts, client.IdempotencyKey(key))
			}
			var p any
			if body != nil {
				p = body
			}
			sub, err := a.c.Submit(cmd.Context(), args[0], p, opts...)
			if err != nil {
				return err
			}
			a.warn(sub.Warnings)
			if wait {
				j, err := a.c.Wait(cmd.Context(), sub.JobID)
				if err != nil {
					return err
				}
				if err := a.printJob(j); err != nil {
					return err
				}
				return jobOutcome(j)
			}
			return emitOne(a, sub, sub.JobID, [][2]string{{"JOB_ID", sub.JobID}, {"STATUS", sub.Status}})
		}),
	}
	f := cmd.Flags()
	f.StringVar(&payload, "payload", "", "payload, as JSON")
	f.StringVar(&payloadFile, "payload-file", "", "read the payload (JSON) from a file, - for stdin")
	f.StringVar(&queue, "queue", "", "queue (default \"default\")")
	f.IntVar(&priority, "priority", 0, "priority, -1000..1000; higher runs first")
	f.IntVar(&retries, "max-retries", 3, "retries after the first attempt, 0..100")
	f.DurationVar(&delay, "delay", 0, "first attempt after this delay")
	f.StringVar(&runAt, "run-at", "", "first attempt at this RFC 3339 time")
	f.DurationVar(&timeout, "timeout", 0, "bound on each attempt")
	f.StringVar(&key, "idempotency-key", "", "a repeat with this key answers the first job")
	f.StringVar(&concurrencyKey, "concurrency-key", "", "put the job under this key's limit (dtsctl limits)")
	f.BoolVar(&wait, "wait", false, "wait until the job ends and print it (exit 1 if it failed or was canceled)")
	return cmd
}

// readPayload reads the payload of --payload or --payload-file ("-" is
// stdin): nil when neither is given. It must be JSON.
func (a *app) readPayload(payload, payloadFile string) (json.RawMessage, error) {
	var body json.RawMessage
	switch {
	case payload != "" && payloadFile != "":
		return nil, usagef("--payload and --payload-file: give one")
	case payload != "":
		body = json.RawMessage(payload)
	case payloadFile != "":
		var b []byte
		var err error
		if payloadFile == "-" {
			b, err = io.ReadAll(a.env.Stdin)
		} else {
			b, err = os.ReadFile(payloadFile)
		}
		if err != nil {
			return nil, fmt.Errorf("--payload-file: %w", err)
		}
		body = b
	}
	if body != nil && !json.Valid(body) {
		return nil, usagef("payload is not JSON (a string needs quotes: --payload '\"text\"')")
	}
	return body, nil
}

// jobOutcome is the error of a job that ended without completing.
func jobOutcome(j *client.Job) error {
	if j.Status == client.StatusCompleted {
		return nil
	}
	return fmt.Errorf("job %s ended %s: %s", j.JobID, j.Status, fmtOpt(j.LastError))
}

// filters are the ls filters that bulk forms take too.
type filters struct {
	status, name, queue string
	all                 bool
}

func (fl *filters) add(cmd *cobra.Command, withStatus bool) {
	if withStatus {
		cmd.Flags().StringVar(&fl.status, "status", "", "only jobs in this status (pending, leased, retrying, completed, failed, canceled)")
		_ = cmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions([]string{"pending", "leased", "retrying",
			"completed", "failed", "canceled"}, cobra.ShellCompDirectiveNoFileComp))
	}
	cmd.Flags().StringVar(&fl.name, "name", "", "only jobs of this type")
	cmd.Flags().StringVar(&fl.queue, "queue", "", "only jobs of this queue")
}

func (a *app) jobsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Short: "List, inspect, watch, cancel, requeue and delete jobs"}
	return group(cmd, a.jobsLsCmd(), a.jobsGetCmd(), a.jobsTimelineCmd(), a.jobsWatchCmd(), a.jobsLogsCmd(),
		a.actionCmd("cancel", client.BulkCancel, "", "Cancel jobs: pending and retrying at once, running ones when their attempt stops",
			`  dtsctl jobs cancel 12 13
  dtsctl jobs cancel --status pending --name report --dry-run
  dtsctl jobs cancel --all --yes`),
		a.actionCmd("requeue", client.BulkRequeue, "", "Make failed jobs pending again",
			`  dtsctl jobs requeue 7
  dtsctl jobs requeue --name send_email --yes`),
		a.actionCmd("delete", client.BulkDelete, "", "Delete completed, failed or canceled jobs",
			`  dtsctl jobs delete 7
  dtsctl jobs delete --status completed --dry-run`))
}

func (a *app) jobsLsCmd() *cobra.Command {
	var fl filters
	var limit int
	var cursor string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List jobs, newest first",
		Example: `  dtsctl jobs ls --status failed --limit 20
  dtsctl jobs ls --name send_email --all -o jsonl
  dtsctl jobs ls --queue reports --status pending -q`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			p := client.ListParams{Status: fl.status, Name: fl.name, Queue: fl.queue, Limit: limit, Cursor: cursor}
			var page *client.JobPage
			if fl.all {
				page = &client.JobPage{Jobs: []client.Job{}}
				for j, err := range a.c.ListAll(cmd.Context(), p) {
					if err != nil {
						return err
					}
					page.Jobs = append(page.Jobs, *j)
				}
			} else {
				var err error
				if page, err = a.c.List(cmd.Context(), p); err != nil {
					return err
				}
			}
			if err := emit(a, jobListing(page, page.Jobs)); err != nil {
				return err
			}
			if page.NextCursor != nil && a.output == "table" && !a.quiet {
				fmt.Fprintf(a.env.Stderr, "more: --cursor %s (or --all)\n", *page.NextCursor)
			}
			return nil
		}),
	}
	fl.add(cmd, true)
	cmd.Flags().BoolVar(&fl.all, "all", false, "follow the cursors to the last page")
	cmd.Flags().IntVar(&limit, "limit", 50, "jobs per page, 1..1000")
	cmd.Flags().StringVar(&cursor, "cursor", "", "start after this cursor (next_cursor of a page)")
	return cmd
}

func jobListing(whole any, jobs []client.Job) listing[client.Job] {
	return listing[client.Job]{
		whole:  whole,
		items:  jobs,
		id:     func(j client.Job) string { return j.JobID },
		header: []string{"ID", "NAME", "QUEUE", "STATUS", "ATTEMPTS", "WORKER", "CREATED", "LAST ERROR"},
		row: func(j client.Job) []string {
			return []string{j.JobID, j.Name, j.Queue, j.Status, fmt.Sprintf("%d/%d", j.Attempts, j.MaxRetries+1),
				fmtOpt(j.WorkerID), fmtTime(j.CreatedAt), clip(fmtOpt(j.LastError), 40)}
		},
	}
}

func (a *app) printJob(j *client.Job) error {
	return emitOne(a, j, j.JobID, jobFields(j))
}

// jobFields are a job's table fields, one per line.
func jobFields(j *client.Job) [][2]string {
	fields := [][2]string{
		{"ID", j.JobID}, {"NAME", j.Name}, {"QUEUE", j.Queue}, {"PRIORITY", itoa(j.Priority)},
		{"STATUS", j.Status}, {"ATTEMPTS", fmt.Sprintf("%d of %d", j.Attempts, j.MaxRetries+1)},
		{"WORKER", fmtOpt(j.WorkerID)}, {"CREATED", fmtTime(j.CreatedAt)}, {"STARTED", fmtOptTime(j.StartedAt)},
		{"FINISHED", fmtOptTime(j.FinishedAt)}, {"NEXT RUN", fmtOptTime(j.NextRunAt)},
		{"PAYLOAD", clip(string(j.Payload), 200)}, {"RESULT", clip(rawOrDash(j.Result), 200)},
		{"LAST ERROR", fmtOpt(j.LastError)},
	}
	if j.CancelRequested {
		fields = append(fields, [2]string{"CANCEL", "requested"})
	}
	for _, e := range j.Errors {
		fields = append(fields, [2]string{fmt.Sprintf("ERROR %d", e.Attempt),
			fmt.Sprintf("%s (%s, %s) %s", clip(e.Error, 120), e.Reason, orDash(e.WorkerID), fmtTime(e.At))})
	}
	return fields
}

func rawOrDash(b json.RawMessage) string {
	if len(b) == 0 || string(b) == "null" {
		return "-"
	}
	return string(b)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) jobsGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID...",
		Short: "Show jobs: status, attempts, errors, result",
		Example: `  dtsctl jobs get 42
  dtsctl jobs get 42 -o json | jq .result`,
		Args: cobra.MinimumNArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return eachID(a, args, func(id string) error {
				j, err := a.c.Get(cmd.Context(), id)
				if err != nil {
					return err
				}
				return a.printJob(j)
			})
		}),
	}
}

func (a *app) jobsTimelineCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "timeline ID",
		Short: "Show a job's timeline: each lease with its worker and token, failures, backoffs, stale results",
		Long: `Show a job's timeline, oldest first, with times from its submission: each lease with its
worker and fencing token (the running lease's token is never shown), how often heartbeats
extended it, results and errors, backoffs, the dead letter, results rejected as stale and
operator actions. -o json prints GET /jobs/{id}/timeline as the API answers it (with the
attempts table); -o jsonl one timeline entry a line.`,
		Example: `  dtsctl jobs timeline 42
  dtsctl jobs timeline 42 -o json | jq '.attempts[] | {attempt, worker_id, duration_ms, outcome}'`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			t, err := a.c.Timeline(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return emit(a, listing[client.TimelineEntry]{
				whole:  t,
				items:  t.Timeline,
				id:     func(e client.TimelineEntry) string { return t.JobID },
				header: []string{"AT", "KIND", "ATTEMPT", "WORKER", "TOKEN", "DETAIL"},
				row: func(e client.TimelineEntry) []string {
					attempt := "-"
					if e.Attempt > 0 {
						attempt = itoa(e.Attempt)
					}
					return []string{"+" + fmtSince(t.CreatedAt, e.At), e.Kind, attempt, orDash(e.WorkerID), orDash(e.LeaseToken),
						clip(timelineDetail(e), 80)}
				},
			})
		}),
	}
}

// fmtSince is at's distance from start, to the millisecond.
func fmtSince(start, at time.Time) string {
	return at.Sub(start).Round(time.Millisecond).String()
}

// timelineDetail is the one-line rest of a timeline entry: what the
// columns before it do not hold.
func timelineDetail(e client.TimelineEntry) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+v)
		}
	}
	if e.Running {
		parts = append(parts, "running")
	}
	if e.Until != nil {
		add("until ", fmtTime(*e.Until))
	}
	if e.LeaseExtensions > 0 {
		add("extended ", itoa(e.LeaseExtensions)+"x")
	}
	add("", e.Reason)
	add("", e.Error)
	add("outcome ", e.Outcome)
	if e.OfAttempt > 0 {
		add("of attempt ", itoa(e.OfAttempt))
	}
	add("", e.Action)
	add("by ", e.Actor)
	add("result ", e.Result)
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// eachID runs f on every id, going on after a failure (reported on
// stderr); the error is the first failure's.
func eachID(a *app, ids []string, f func(id string) error) error {
	var firstErr error
	for _, id := range ids {
		if err := f(id); err != nil {
			if len(ids) == 1 {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "dtsctl: %s: %v\n", id, err)
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if firstErr != nil && len(ids) > 1 {
		return quietError{firstErr}
	}
	return firstErr
}

// quietError is an error already reported; Main prints its summary only.
type quietError struct{ err error }

func (e quietError) Error() string { return "some ids failed: " + e.err.Error() }
func (e quietError) Unwrap() error { return e.err }

func (a *app) jobsWatchCmd() *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "watch ID",
		Short: "Print a job's status as it changes, until it ends (exit 1 if it failed or was canceled)",
		Example: `  dtsctl jobs watch 42
  dtsctl jobs watch 42 --interval 200ms -o jsonl`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			last := ""
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				j, err := a.c.Get(ctx, args[0])
				if err != nil {
					return err
				}
				if state := fmt.Sprintf("%s %d %v", j.Status, j.Attempts, j.CancelRequested); state != last {
					last = state
					if a.output == "table" && !a.quiet {
						fmt.Fprintf(a.env.Stdout, "%s  %s  %s  attempts %d/%d  worker %s\n", time.Now().UTC().Format(time.RFC3339),
							j.JobID, j.Status, j.Attempts, j.MaxRetries+1, fmtOpt(j.WorkerID))
					} else if a.output == "jsonl" {
						_ = json.NewEncoder(a.env.Stdout).Encode(j)
					}
				}
				if client.Terminal(j.Status) {
					if a.output == "json" || a.quiet {
						if err := a.printJob(j); err != nil {
							return err
						}
					}
					return jobOutcome(j)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-t.C:
				}
			}
		}),
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between polls")
	return cmd
}

// actionCmd is a command that acts on jobs by id (ID...) or, with the ls
// filters or --all, on every job they select (POST /jobs/bulk), which
// needs --yes, or --dry-run to print how many jobs it would change.
// status, when set, is a fixed status filter (dlq commands). The API
// runs an action by queue only in the background: with --queue, --yes
// starts the operation and waits for its end, as if it were not.
func (a *app) actionCmd(use, action, status, short, example string) *cobra.Command {
	var fl filters
	var dryRun, yes, background bool
	cmd := &cobra.Command{
		Use:     use + " [ID...]",
		Short:   short,
		Example: example,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			filtered := fl.all || fl.status != "" || fl.name != "" || fl.queue != "" || status != ""
			if len(args) > 0 {
				if filtered && status == "" || fl.all || fl.name != "" || fl.queue != "" {
					return usagef("give ids or filters, not both")
				}
				if dryRun || yes || background {
					return usagef("--dry-run, --yes and --background are for filters, not ids")
				}
				return eachID(a, args, func(id string) error { return a.act(cmd, action, id) })
			}
			if !filtered {
				return usagef("give ids, or filters (--status, --name, --queue, or --all for every job)")
			}
			req := client.BulkRequest{Action: action, Status: first(status, fl.status), Name: fl.name, Queue: fl.queue, DryRun: true}
			if !dryRun && !yes {
				return usagef("a %s by filter changes every job it selects: add --dry-run to count them or --yes to go ahead", use)
			}
			req.DryRun, req.Background = dryRun, background
			if fl.queue != "" && !dryRun && !background {
				return a.bulkAndWait(cmd.Context(), req)
			}
			res, err := a.c.Bulk(cmd.Context(), req)
			if err != nil {
				return err
			}
			switch {
			case background && !dryRun && a.output == "table" && res.OperationID == "":
				_, err = fmt.Fprintf(a.env.Stdout, "%s: no job matches\n", action)
			case background && !dryRun && a.output == "table" && a.quiet:
				_, err = fmt.Fprintln(a.env.Stdout, res.OperationID)
			case background && !dryRun && a.output == "table":
				_, err = fmt.Fprintf(a.env.Stdout, "%s of %d jobs started: operation %s (dtsctl operations get %s)\n",
					action, res.Matched, res.OperationID, res.OperationID)
			case a.output != "table":
				return emitOne(a, res, "", nil)
			case dryRun || a.quiet:
				n := res.Matched
				if !dryRun {
					n = res.Affected
				}
				_, err = fmt.Fprintln(a.env.Stdout, n)
			default:
				_, err = fmt.Fprintf(a.env.Stdout, "%s: %d of %d jobs\n", action, res.Affected, res.Matched)
			}
			return err
		}),
	}
	if status == "" {
		fl.add(cmd, true)
		cmd.Flags().BoolVar(&fl.all, "all", false, "every job the action applies to")
	} else {
		fl.add(cmd, false)
		cmd.Flags().BoolVar(&fl.all, "all", false, "every job of the dead-letter queue")
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print how many jobs the filters select; change nothing")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "act on every job the filters select")
	cmd.Flags().BoolVar(&background, "background", false, "with --yes: run as a background operation, in batches, and print its id")
	return cmd
}

// bulkAndWait runs req as a background operation, waits for its end and
// prints what a bulk action run at once prints (-o json: the operation).
func (a *app) bulkAndWait(ctx context.Context, req client.BulkRequest) error {
	req.Background = true
	res, err := a.c.Bulk(ctx, req)
	if err != nil {
		return err
	}
	op := &client.Operation{OperationID: res.OperationID, Action: req.Action, State: client.OperationDone}
	if res.OperationID != "" {
		if op, err = a.waitOperation(ctx, res.OperationID); err != nil {
			return err
		}
	}
	switch {
	case a.output != "table":
		err = emitOne(a, op, op.OperationID, nil)
	case a.quiet:
		_, err = fmt.Fprintln(a.env.Stdout, op.Affected)
	default:
		_, err = fmt.Fprintf(a.env.Stdout, "%s: %d of %d jobs\n", req.Action, op.Affected, op.Matched)
	}
	if err == nil && op.State != client.OperationDone {
		err = fmt.Errorf("operation %s ended %s after %d of %d jobs: %s", op.OperationID, op.State, op.Processed, op.Matched,
			orDash(op.Error))
	}
	return err
}

// waitOperation polls an operation until it is no longer running.
func (a *app) waitOperation(ctx context.Context, id string) (*client.Operation, error) {
	pause := 20 * time.Millisecond
	for {
		op, err := a.c.Operation(ctx, id)
		if err != nil {
			return nil, err
		}
		if op.State != client.OperationRunning {
			return op, nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("wait for operation %s (dtsctl operations get %s): %w", id, id, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// act runs one action on one job and prints its answer.
func (a *app) act(cmd *cobra.Command, action, id string) error {
	var sub client.Submitted
	var err error
	switch action {
	case client.BulkCancel:
		sub, err = a.c.Cancel(cmd.Context(), id)
	case client.BulkRequeue:
		sub, err = a.c.Requeue(cmd.Context(), id)
	case client.BulkDelete:
		sub, err = a.c.Delete(cmd.Context(), id)
	default:
		return errors.New("unknown action " + action)
	}
	if err != nil {
		return err
	}
	return a.printAction(sub)
}

// printAction prints the answer of an action on one job.
func (a *app) printAction(sub client.Submitted) error {
	var err error
	if a.output == "table" && !a.quiet {
		note := ""
		if sub.CancelRequested {
			note = " (cancel requested; it ends when its attempt stops)"
		}
		_, err = fmt.Fprintf(a.env.Stdout, "%s %s%s\n", sub.JobID, sub.Status, note)
		return err
	}
	if a.output == "json" {
		return writeJSON(a.env.Stdout, sub)
	}
	return emitOne(a, sub, sub.JobID, nil)
}

// ---- dead-letter queue ----

func (a *app) dlqCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "The dead-letter queue: failed jobs"}
	var limit int
	var all bool
	var cursor, queue string
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List failed jobs, the most recently failed first",
		Example: `  dtsctl dlq ls
  dtsctl dlq ls --queue reports
  dtsctl dlq ls --all -q`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			p := client.DLQParams{Queue: queue, Limit: limit, Cursor: cursor}
			page, err := a.c.DLQ(cmd.Context(), p)
			if err != nil {
				return err
			}
			for all && page.NextCursor != nil {
				p.Cursor = *page.NextCursor
				next, err := a.c.DLQ(cmd.Context(), p)
				if err != nil {
					return err
				}
				page.Jobs, page.NextCursor = append(page.Jobs, next.Jobs...), next.NextCursor
			}
			if err := emit(a, listing[client.DLQJob]{
				whole:  page,
				items:  page.Jobs,
				id:     func(j client.DLQJob) string { return j.JobID },
				header: []string{"ID", "NAME", "QUEUE", "REASON", "ATTEMPTS", "FAILED", "LAST ERROR"},
				row: func(j client.DLQJob) []string {
					return []string{j.JobID, j.Name, j.Queue, j.Reason, itoa(j.Attempts), fmtOptTime(j.FinishedAt),
						clip(fmtOpt(j.LastError), 50)}
				},
			}); err != nil {
				return err
			}
			if page.NextCursor != nil && a.output == "table" && !a.quiet {
				fmt.Fprintf(a.env.Stderr, "more: --cursor %s (or --all)\n", *page.NextCursor)
			}
			return nil
		}),
	}
	ls.Flags().StringVar(&queue, "queue", "", "only jobs of this queue")
	ls.Flags().IntVar(&limit, "limit", 50, "jobs per page, 1..1000")
	ls.Flags().BoolVar(&all, "all", false, "follow the cursors to the last page")
	ls.Flags().StringVar(&cursor, "cursor", "", "start after this cursor (next_cursor of a page)")

	show := &cobra.Command{
		Use:     "show ID",
		Short:   "Show a failed job with its error history",
		Example: `  dtsctl dlq show 7`,
		Args:    cobra.ExactArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			j, err := a.c.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printJob(j)
		}),
	}
	requeue := a.actionCmd("requeue", client.BulkRequeue, client.StatusFailed, "Make failed jobs pending again, one with a new payload",
		`  dtsctl dlq requeue 7 9
  dtsctl dlq requeue 7 --payload '{"to":"fixed@example.com"}'
  dtsctl dlq show 7 -o json | jq .payload > p.json && $EDITOR p.json && dtsctl dlq requeue 7 --payload-file p.json
  dtsctl dlq requeue --name send_email --dry-run
  dtsctl dlq requeue --all --yes`)
	a.withPayloadEdit(requeue)
	purge := a.actionCmd("purge", client.BulkDelete, client.StatusFailed, "Delete failed jobs",
		`  dtsctl dlq purge --all --dry-run
  dtsctl dlq purge --name webhook --yes`)
	return group(cmd, ls, show, requeue, purge)
}

// withPayloadEdit gives dlq requeue --payload and --payload-file: requeue
// one job with a new payload (POST /dlq/{id}/requeue with {"payload":
// ...}), checked by the server as a submitted one is.
func (a *app) withPayloadEdit(cmd *cobra.Command) {
	var payload, payloadFile string
	f := cmd.Flags()
	f.StringVar(&payload, "payload", "", "with one ID: requeue it with this payload (JSON) instead of its own")
	f.StringVar(&payloadFile, "payload-file", "", "with one ID: requeue it with the payload (JSON) of this file, - for stdin")
	edited := run(func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usagef("--payload and --payload-file requeue one job: give one ID")
		}
		for _, name := range []string{"name", "all", "dry-run", "yes", "background"} {
			if f.Changed(name) {
				return usagef("--%s does not go with --payload or --payload-file", name)
			}
		}
		body, err := a.readPayload(payload, payloadFile)
		if err != nil {
			return err
		}
		if body == nil {
			return usagef("the new payload is empty: give a JSON value (null for none)")
		}
		sub, err := a.c.RequeueWithPayload(cmd.Context(), args[0], body)
		if err != nil {
			return err
		}
		return a.printAction(sub)
	})
	plain := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if f.Changed("payload") || f.Changed("payload-file") {
			return edited(cmd, args)
		}
		return plain(cmd, args)
	}
}
