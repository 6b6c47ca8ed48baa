package command

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/dtsched/dts/client"
)

// This file holds `dtsctl schedules`: periodic jobs (GET /schedules and
// its actions). Reads need the read scope, the rest admin.

func (a *app) schedulesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "schedules", Aliases: []string{"schedule"},
		Short: "List, create, pause, resume, trigger and delete schedules (periodic jobs)"}
	return group(cmd, a.schedulesLsCmd(), a.schedulesGetCmd(), a.schedulesCreateCmd(),
		a.scheduleActionCmd("pause", "Stop a schedule's ticks until it is resumed", (*client.Client).PauseSchedule),
		a.scheduleActionCmd("resume", "Start a paused schedule again from its next tick after now (missed ticks are not enqueued)", (*client.Client).ResumeSchedule),
		a.scheduleActionCmd("delete", "Delete a schedule; the jobs it enqueued stay", (*client.Client).DeleteSchedule),
		a.schedulesTriggerCmd())
}

func (a *app) schedulesLsCmd() *cobra.Command {
	var limit int
	var all bool
	var cursor string
	cmd := &cobra.Command{
		Use: "ls", Aliases: []string{"list"}, Short: "List schedules, newest first", Args: cobra.NoArgs,
		Example: `  dtsctl schedules ls
  dtsctl schedules ls --all -o jsonl`,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			p := client.ScheduleListParams{Limit: limit, Cursor: cursor}
			page, err := a.c.Schedules(cmd.Context(), p)
			if err != nil {
				return err
			}
			for all && page.NextCursor != nil {
				p.Cursor = *page.NextCursor
				next, err := a.c.Schedules(cmd.Context(), p)
				if err != nil {
					return err
				}
				page.Schedules, page.NextCursor = append(page.Schedules, next.Schedules...), next.NextCursor
			}
			if err := emit(a, listing[client.Schedule]{
				whole: page, items: page.Schedules,
				id:     func(s client.Schedule) string { return s.ScheduleID },
				header: []string{"ID", "NAME", "CRON", "TIME ZONE", "JOB", "QUEUE", "PAUSED", "NEXT FIRE AT", "LAST FIRE AT", "LAST JOB ID"},
				row: func(s client.Schedule) []string {
					return []string{s.ScheduleID, s.Name, s.Cron, s.TimeZone, s.Job.Name, s.Job.Queue, fmt.Sprint(s.Paused),
						fmtOptTime(s.NextFireAt), fmtOptTime(s.LastFireAt), fmtOpt(s.LastJobID)}
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
	cmd.Flags().IntVar(&limit, "limit", 50, "schedules per page, 1..1000")
	cmd.Flags().BoolVar(&all, "all", false, "follow the cursors to the last page")
	cmd.Flags().StringVar(&cursor, "cursor", "", "start after this cursor (next_cursor of a page)")
	return cmd
}

func (a *app) printSchedule(s *client.Schedule) error {
	return emitOne(a, s, s.ScheduleID, [][2]string{
		{"ID", s.ScheduleID}, {"NAME", s.Name}, {"CRON", s.Cron}, {"TIME ZONE", s.TimeZone},
		{"PAUSED", fmt.Sprint(s.Paused)}, {"NEXT FIRE AT", fmtOptTime(s.NextFireAt)},
		{"LAST FIRE AT", fmtOptTime(s.LastFireAt)}, {"LAST JOB ID", fmtOpt(s.LastJobID)},
		{"OVERLAP", s.Overlap}, {"CATCH UP", s.CatchUp},
		{"JOB", s.Job.Name}, {"QUEUE", s.Job.Queue}, {"PRIORITY", itoa(s.Job.Priority)},
		{"MAX RETRIES", itoa(s.Job.MaxRetries)}, {"TIMEOUT SECONDS", itoa(s.Job.TimeoutSeconds)},
		{"PAYLOAD", clip(rawOrDash(s.Job.Payload), 200)}, {"CREATED", fmtTime(s.CreatedAt)},
	})
}

func (a *app) schedulesGetCmd() *cobra.Command {
	return &cobra.Command{
		Use: "get ID...", Short: "Show schedules: cron, job template, next and last fire", Args: cobra.MinimumNArgs(1),
		Example: `  dtsctl schedules get 3
  dtsctl schedules get 3 -o json | jq .next_fire_at`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return eachID(a, args, func(id string) error {
				s, err := a.c.Schedule(cmd.Context(), id)
				if err != nil {
					return err
				}
				return a.printSchedule(s)
			})
		}),
	}
}

func (a *app) schedulesCreateCmd() *cobra.Command {
	var spec client.ScheduleSpec
	var jobName, payload, payloadFile, queue string
	var priority, retries int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "create NAME --cron EXPR --job TYPE",
		Short: "Create a schedule: a job of --job TYPE at every tick of --cron",
		Long: `Create a schedule: at every tick of --cron (5 fields, 6 with seconds first, or @yearly,
@monthly, @weekly, @daily, @hourly), read in --time-zone, the leader coordinator enqueues
a job of type --job with the payload and options given here. NAME is unique among
schedules. -q prints the new schedule's id.`,
		Example: `  dtsctl schedules create nightly-report --cron '0 3 * * *' --time-zone Europe/Paris --job report --payload '{"kind":"daily"}'
  dtsctl schedules create heartbeat --cron '*/30 * * * * *' --job noop --overlap allow --catch-up none -q`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			body, err := a.readPayload(payload, payloadFile)
			if err != nil {
				return err
			}
			spec.Name = args[0]
			spec.Job = client.Request{Name: jobName}
			if body != nil {
				spec.Job.Payload = body
			}
			f := cmd.Flags()
			if queue != "" {
				spec.Job.Options = append(spec.Job.Options, client.Queue(queue))
			}
			if f.Changed("priority") {
				spec.Job.Options = append(spec.Job.Options, client.Priority(priority))
			}
			if f.Changed("max-retries") {
				spec.Job.Options = append(spec.Job.Options, client.MaxRetries(retries))
			}
			if f.Changed("timeout") {
				spec.Job.Options = append(spec.Job.Options, client.Timeout(timeout))
			}
			s, err := a.c.CreateSchedule(cmd.Context(), spec)
			if err != nil {
				return err
			}
			a.warn(s.Warnings)
			return a.printSchedule(s)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&spec.Cron, "cron", "", "cron expression (required)")
	f.StringVar(&spec.TimeZone, "time-zone", "", "IANA time zone the expression is read in (default UTC)")
	f.StringVar(&jobName, "job", "", "type (name) of each tick's job (required)")
	f.StringVar(&payload, "payload", "", "the jobs' payload, as JSON")
	f.StringVar(&payloadFile, "payload-file", "", "read the jobs' payload (JSON) from a file, - for stdin")
	f.StringVar(&queue, "queue", "", "the jobs' queue (default \"default\")")
	f.IntVar(&priority, "priority", 0, "the jobs' priority, -1000..1000")
	f.IntVar(&retries, "max-retries", 3, "the jobs' retries after the first attempt, 0..100")
	f.DurationVar(&timeout, "timeout", 0, "bound on each attempt of the jobs")
	f.StringVar(&spec.Overlap, "overlap", "", "skip: no tick while the last tick's job is unfinished (default); allow: tick anyway")
	f.StringVar(&spec.CatchUp, "catch-up", "", "one: one job for the ticks missed while no coordinator led (default); none: drop them")
	_ = cmd.RegisterFlagCompletionFunc("overlap", cobra.FixedCompletions([]string{client.OverlapSkip, client.OverlapAllow}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("catch-up", cobra.FixedCompletions([]string{client.CatchUpOne, client.CatchUpNone}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagRequired("cron")
	_ = cmd.MarkFlagRequired("job")
	return cmd
}

// scheduleActionCmd is pause, resume or delete of schedules by id; it
// prints a line each, or with -o json the schedule the API answers.
func (a *app) scheduleActionCmd(use, short string, do func(*client.Client, context.Context, string) (*client.Schedule, error)) *cobra.Command {
	past := map[string]string{"pause": "paused", "resume": "resumed", "delete": "deleted"}[use]
	return &cobra.Command{
		Use: use + " ID...", Short: short, Args: cobra.MinimumNArgs(1),
		Example: fmt.Sprintf("  dtsctl schedules %s 3", use),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return eachID(a, args, func(id string) error {
				s, err := do(a.c, cmd.Context(), id)
				if err != nil {
					return err
				}
				if a.output != "table" || a.quiet {
					return emitOne(a, s, s.ScheduleID, nil)
				}
				next := ""
				if use != "delete" {
					next = ", next fire at " + fmtOptTime(s.NextFireAt)
				}
				_, err = fmt.Fprintf(a.env.Stdout, "%s %s %s%s\n", s.ScheduleID, s.Name, past, next)
				return err
			})
		}),
	}
}

func (a *app) schedulesTriggerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "trigger ID",
		Short: "Enqueue one job from a schedule's template now, paused or not (its next tick stays as it was)",
		Example: `  dtsctl schedules trigger 3
  JOB=$(dtsctl schedules trigger 3 -q) && dtsctl jobs watch "$JOB"`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			sub, err := a.c.TriggerSchedule(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printAction(sub)
		}),
	}
}
