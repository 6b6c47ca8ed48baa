package command

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dtsched/dts/client"
)

// ---- queues ----

func (a *app) queuesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "queues", Short: "List, pause, resume and cap queues"}
	ls := &cobra.Command{
		Use: "ls", Aliases: []string{"list"}, Short: "List queues", Args: cobra.NoArgs,
		Example: `  dtsctl queues ls`,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			qs, err := a.c.Queues(cmd.Context())
			if err != nil {
				return err
			}
			return emit(a, listing[client.QueueInfo]{
				whole: map[string]any{"queues": qs}, items: qs,
				id:     func(q client.QueueInfo) string { return q.Name },
				header: queueHeader(),
				row:    queueRow,
			})
		}),
	}
	pause := &cobra.Command{
		Use: "pause NAME", Short: "Stop dispatching a queue's jobs", Args: cobra.ExactArgs(1),
		Example: `  dtsctl queues pause reports`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if err := a.c.PauseQueue(cmd.Context(), args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(a.env.Stdout, "%s paused\n", args[0])
			return err
		}),
	}
	resume := &cobra.Command{
		Use: "resume NAME", Short: "Dispatch a paused queue's jobs again", Args: cobra.ExactArgs(1),
		Example: `  dtsctl queues resume reports`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if err := a.c.ResumeQueue(cmd.Context(), args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(a.env.Stdout, "%s resumed\n", args[0])
			return err
		}),
	}
	limit := &cobra.Command{
		Use: "cap NAME N", Short: "Run at most N of a queue's jobs at once across the cluster (0: no cap)", Args: cobra.ExactArgs(2),
		Example: `  dtsctl queues cap reports 4
  dtsctl queues cap reports 0`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 0 {
				return usagef("N must be a whole number, 0 or more: %q", args[1])
			}
			q, err := a.c.SetQueueConcurrency(cmd.Context(), args[0], n)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.env.Stdout, "%s capped at %d\n", q.Name, q.Concurrency)
			return err
		}),
	}
	return group(cmd, ls, pause, resume, limit)
}

// queueHeader is GET /queues' field names, upper case, in its order: the
// words the console uses too, and a field the API gains is a column at
// once.
func queueHeader() []string {
	t := reflect.TypeFor[client.QueueInfo]()
	header := make([]string, t.NumField())
	for i := range header {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		header[i] = strings.ToUpper(strings.ReplaceAll(name, "_", " "))
	}
	return header
}

// queueRow is a queue's fields in queueHeader's order.
func queueRow(q client.QueueInfo) []string {
	v := reflect.ValueOf(q)
	row := make([]string, v.NumField())
	for i := range row {
		switch f := v.Field(i); f.Kind() {
		case reflect.Float32, reflect.Float64:
			row[i] = strconv.FormatFloat(f.Float(), 'f', 1, 64)
		default:
			row[i] = fmt.Sprint(f.Interface())
		}
	}
	return row
}

// ---- limits ----

func (a *app) limitsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "limits", Short: "List, set and remove concurrency and rate limits"}
	ls := &cobra.Command{
		Use: "ls", Aliases: []string{"list"}, Short: "List limits", Args: cobra.NoArgs,
		Example: `  dtsctl limits ls`,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			ls, err := a.c.Limits(cmd.Context())
			if err != nil {
				return err
			}
			return emit(a, listing[client.LimitInfo]{
				whole: map[string]any{"limits": ls}, items: ls,
				id:     func(l client.LimitInfo) string { return l.Key },
				header: []string{"KEY", "CONCURRENCY", "RATE", "PERIOD", "RUNNING", "WAITING"},
				row: func(l client.LimitInfo) []string {
					return []string{l.Key, fmt.Sprint(l.Concurrency), fmt.Sprint(l.Rate),
						(time.Duration(l.PeriodSeconds) * time.Second).String(), itoa(l.Running), itoa(l.Waiting)}
				},
			})
		}),
	}
	var concurrency, rate int
	var period time.Duration
	set := &cobra.Command{
		Use:   "set KEY",
		Short: "Limit a key's jobs (name:<job name> or a concurrency key): at most --concurrency at once, --rate per --period",
		Args:  cobra.ExactArgs(1),
		Example: `  dtsctl limits set tenant-7 --concurrency 5
  dtsctl limits set name:send_email --rate 100 --period 1m
  dtsctl limits set api --concurrency 2 --rate 10 --period 1s`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if period%time.Second != 0 {
				return usagef("--period must be whole seconds: %s", period)
			}
			l, err := a.c.SetLimit(cmd.Context(), args[0], concurrency, rate, period)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.env.Stdout, "%s limited: concurrency %d, rate %d per %s\n", l.Key, l.Concurrency, l.Rate,
				time.Duration(l.PeriodSeconds)*time.Second)
			return err
		}),
	}
	f := set.Flags()
	f.IntVar(&concurrency, "concurrency", 0, "at most this many of the key's jobs running at once (0: no cap)")
	f.IntVar(&rate, "rate", 0, "at most this many starts per --period (0: no rate limit)")
	f.DurationVar(&period, "period", 0, "the rate's period, whole seconds (with --rate)")
	rm := &cobra.Command{
		Use: "rm KEY", Aliases: []string{"delete"}, Short: "Remove a key's limit", Args: cobra.ExactArgs(1),
		Example: `  dtsctl limits rm tenant-7`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if err := a.c.DeleteLimit(cmd.Context(), args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(a.env.Stdout, "%s unlimited\n", args[0])
			return err
		}),
	}
	return group(cmd, ls, set, rm)
}

// ---- workers ----

func (a *app) workersCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "workers", Short: "The workers, as the leader coordinator last recorded them"}
	ls := &cobra.Command{
		Use: "ls", Aliases: []string{"list"}, Short: "List workers", Args: cobra.NoArgs,
		Example: `  dtsctl workers ls
  dtsctl workers ls -o json`,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			ws, err := a.c.Workers(cmd.Context())
			if err != nil {
				return err
			}
			return emit(a, listing[client.Worker]{
				whole: map[string]any{"workers": ws}, items: ws,
				id:     func(w client.Worker) string { return w.WorkerID },
				header: []string{"ID", "STATE", "IN FLIGHT", "CONCURRENCY", "LAST HEARTBEAT", "JOB TYPES"},
				row: func(w client.Worker) []string {
					return []string{w.WorkerID, w.State, itoa(w.InFlight), itoa(w.Concurrency), fmtTime(w.LastHeartbeatAt),
						clip(strings.Join(w.JobTypes, ","), 40)}
				},
			})
		}),
	}
	get := &cobra.Command{
		Use: "get ID", Short: "Show a worker", Args: cobra.ExactArgs(1),
		Example: `  dtsctl workers get w1`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			w, err := a.c.Worker(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return emitOne(a, w, w.WorkerID, workerFields(w))
		}),
	}
	return group(cmd, ls, get, a.workersDrainCmd(), a.workersUndrainCmd())
}

// workerFields are a worker's table fields, one per line.
func workerFields(w *client.Worker) [][2]string {
	fields := [][2]string{{"ID", w.WorkerID}, {"STATE", w.State},
		{"IN FLIGHT", itoa(w.InFlight)}, {"CONCURRENCY", itoa(w.Concurrency)},
		{"LAST HEARTBEAT", fmtTime(w.LastHeartbeatAt)}, {"LAST ASSIGNED", fmtOptTime(w.LastAssignedAt)},
		{"JOB TYPES", strings.Join(w.JobTypes, ", ")}, {"LEASED JOBS", orDash(strings.Join(w.LeasedJobs, ", "))},
		{"HOST", orDash(w.Host)}, {"VERSION", orDash(w.Version)}}
	if w.DrainRequestedAt != nil {
		fields = append(fields, [2]string{"DRAIN REQUESTED", fmtTime(*w.DrainRequestedAt) + " by " + orDash(w.DrainRequestedBy)})
	}
	return fields
}

// ---- stats ----

func (a *app) statsCmd() *cobra.Command {
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Counts by state, queue depth, DLQ depth, workers",
		Example: `  dtsctl stats
  dtsctl stats --watch --interval 5s -o jsonl`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			for {
				st, err := a.c.Stats(ctx)
				if err != nil {
					return err
				}
				if watch && a.output == "table" {
					fmt.Fprintf(a.env.Stdout, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
				}
				if err := emitOne(a, st, "", statsFields(st)); err != nil {
					return err
				}
				if !watch {
					return nil
				}
				t := time.NewTimer(interval)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil // interrupted: the normal end of a watch
				case <-t.C:
				}
			}
		}),
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print again every --interval until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", DefaultInterval, "time between two prints of --watch")
	return cmd
}

func statsFields(st *client.Stats) [][2]string {
	var fields [][2]string
	for _, s := range []string{client.StatusPending, client.StatusLeased, client.StatusRetrying,
		client.StatusCompleted, client.StatusFailed, client.StatusCanceled} {
		fields = append(fields, [2]string{strings.ToUpper(s), itoa(st.Jobs[s])})
	}
	fields = append(fields, [2]string{"QUEUE DEPTH", itoa(st.QueueDepth)}, [2]string{"DLQ DEPTH", itoa(st.DLQDepth)},
		[2]string{"OLDEST PENDING SECONDS", fmt.Sprintf("%.1f", st.OldestPendingSeconds)})
	keys := make([]string, 0, len(st.Workers))
	for k := range st.Workers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ws []string
	for _, k := range keys {
		ws = append(ws, fmt.Sprintf("%s %d", k, st.Workers[k]))
	}
	return append(fields, [2]string{"WORKERS", orDash(strings.Join(ws, ", "))})
}

// ---- API keys and audit ----

func (a *app) tokenCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Create, list and revoke API keys (admin)"}
	var name string
	var scopes []string
	var ttl time.Duration
	create := &cobra.Command{
		Use: "create", Short: "Create an API key; the key is printed this once", Args: cobra.NoArgs,
		Example: `  dtsctl token create --name ci --scope submit,read --ttl 720h
  KEY=$(dtsctl token create --name deploy --scope admin -q)`,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			d := time.Duration(-1)
			if cmd.Flags().Changed("ttl") {
				d = ttl
			}
			t, err := a.c.CreateToken(cmd.Context(), name, scopes, d)
			if err != nil {
				return err
			}
			if a.quiet {
				_, err := fmt.Fprintln(a.env.Stdout, t.Key)
				return err
			}
			return emitOne(a, t, t.ID, append(tokenFields(t.Token), [2]string{"KEY", t.Key}))
		}),
	}
	create.Flags().StringVar(&name, "name", "", "what the key is for (required)")
	create.Flags().StringSliceVar(&scopes, "scope", nil, "scopes: submit, read, admin (repeat or comma-separate)")
	create.Flags().DurationVar(&ttl, "ttl", 0, "lifetime; 0 never expires (default 720h)")
	_ = create.MarkFlagRequired("name")
	_ = create.MarkFlagRequired("scope")
	list := &cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List API keys, newest first", Args: cobra.NoArgs,
		Example: `  dtsctl token list`,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			ts, err := a.c.Tokens(cmd.Context())
			if err != nil {
				return err
			}
			return emit(a, listing[client.Token]{
				whole: map[string]any{"tokens": ts}, items: ts,
				id:     func(t client.Token) string { return t.ID },
				header: []string{"ID", "NAME", "SCOPES", "CREATED", "EXPIRES", "REVOKED", "LAST USED"},
				row: func(t client.Token) []string {
					return []string{t.ID, t.Name, strings.Join(t.Scopes, ","), fmtTime(t.CreatedAt), fmtOptTime(t.ExpiresAt),
						fmtOptTime(t.RevokedAt), fmtOptTime(t.LastUsedAt)}
				},
			})
		}),
	}
	revoke := &cobra.Command{
		Use: "revoke ID", Short: "Revoke an API key", Args: cobra.ExactArgs(1),
		Example: `  dtsctl token revoke 3`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			t, err := a.c.RevokeToken(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return emitOne(a, t, t.ID, tokenFields(*t))
		}),
	}
	return group(cmd, create, list, revoke)
}

func tokenFields(t client.Token) [][2]string {
	return [][2]string{{"ID", t.ID}, {"NAME", t.Name}, {"SCOPES", strings.Join(t.Scopes, ",")},
		{"CREATED", fmtTime(t.CreatedAt)}, {"EXPIRES", fmtOptTime(t.ExpiresAt)}, {"REVOKED", fmtOptTime(t.RevokedAt)}}
}

func (a *app) auditCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "The audit log of admin actions (admin)"}
	var limit int
	var cursor string
	ls := &cobra.Command{
		Use: "ls", Aliases: []string{"list"}, Short: "List audit entries, newest first", Args: cobra.NoArgs,
		Example: `  dtsctl audit ls --limit 20`,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			page, err := a.c.Audit(cmd.Context(), client.AuditParams{Limit: limit, Cursor: cursor})
			if err != nil {
				return err
			}
			return emit(a, listing[client.AuditEntry]{
				whole: page, items: page.Entries,
				id:     func(e client.AuditEntry) string { return e.ID },
				header: []string{"ID", "AT", "ACTOR", "ACTION", "TARGET", "DETAILS"},
				row: func(e client.AuditEntry) []string {
					return []string{e.ID, fmtTime(e.At), e.Actor, e.Action, e.TargetType + ":" + e.TargetID, clip(string(e.Details), 60)}
				},
			})
		}),
	}
	ls.Flags().IntVar(&limit, "limit", 50, "entries per page, 1..1000")
	ls.Flags().StringVar(&cursor, "cursor", "", "start after this cursor (next_cursor of a page)")
	return group(cmd, ls)
}
