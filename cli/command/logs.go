package command

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/dtsched/dts/client"
)

func (a *app) jobsLogsCmd() *cobra.Command {
	var attempt int
	var follow bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print the lines a job's handlers logged, per attempt; --follow until the job ends",
		Long: `Print what the job's handlers logged with their SDK's job logger, oldest first: time, level,
attempt and message (with its key=value attributes). Workers send a running attempt's lines at
most once a second. With --follow, keep printing new lines until the job has ended and its last
lines are in. Lines dropped to keep an attempt within 64 KiB or the job within 256 KiB are counted
at the end (on stderr). -o json prints GET /jobs/{id}/logs as the API answers it; -o jsonl one
line a line.`,
		Example: `  dtsctl jobs logs 42
  dtsctl jobs logs 42 --attempt 2
  dtsctl jobs logs 42 --follow`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			ctx, id := cmd.Context(), args[0]
			opts := client.JobLogsOptions{Attempt: attempt}
			var all client.JobLogs
			var t *time.Ticker
			for {
				page, err := a.c.JobLogs(ctx, id, opts)
				if err != nil {
					return err
				}
				opts.After, all.JobID, all.Dropped, all.NextAfter = page.NextAfter, page.JobID, page.Dropped, page.NextAfter
				if a.output == "json" {
					all.Lines = append(all.Lines, page.Lines...)
				} else {
					a.printLogLines(page.Lines)
				}
				if page.More {
					continue
				}
				if !follow {
					break
				}
				// The job ended before this read: its last lines are in.
				j, err := a.c.Get(ctx, id)
				if err != nil {
					return err
				}
				if client.Terminal(j.Status) {
					if done, err := a.c.JobLogs(ctx, id, opts); err != nil {
						return err
					} else if len(done.Lines) > 0 {
						opts.After = done.NextAfter
						all.Dropped, all.NextAfter = done.Dropped, done.NextAfter
						if a.output == "json" {
							all.Lines = append(all.Lines, done.Lines...)
						} else {
							a.printLogLines(done.Lines)
						}
						continue
					}
					break
				}
				if t == nil {
					t = time.NewTicker(interval)
					defer t.Stop()
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-t.C:
				}
			}
			if a.output == "json" {
				if all.Lines == nil {
					all.Lines = []client.JobLogLine{}
				}
				enc := json.NewEncoder(a.env.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(all)
			}
			for _, d := range all.Dropped {
				if d.Dropped > 0 && !a.quiet {
					fmt.Fprintf(a.env.Stderr, "attempt %d: %d lines dropped (over the attempt's 64 KiB or the job's 256 KiB)\n", d.Attempt, d.Dropped)
				}
			}
			return nil
		}),
	}
	cmd.Flags().IntVar(&attempt, "attempt", 0, "only this attempt's lines")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until the job ends")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "with --follow, time between polls")
	return cmd
}

// printLogLines prints lines as a table's rows or, with -o jsonl, one
// JSON object each.
func (a *app) printLogLines(lines []client.JobLogLine) {
	for _, l := range lines {
		if a.output == "jsonl" {
			_ = json.NewEncoder(a.env.Stdout).Encode(l)
			continue
		}
		fmt.Fprintf(a.env.Stdout, "%s  %-5s  #%d  %s\n", l.Time.UTC().Format("2006-01-02T15:04:05.000Z"), l.Level, l.Attempt, l.Message)
	}
}
