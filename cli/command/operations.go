package command

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dtsched/dts/client"
)

// This file holds `dtsctl workers drain|undrain` and `dtsctl operations`: the
// background bulk operations that `jobs requeue|cancel|delete --background`
// (and the console's "all matching") start.

func (a *app) workersDrainCmd() *cobra.Command {
	return &cobra.Command{
		Use: "drain ID", Short: "Send a worker no new jobs; its running jobs finish", Args: cobra.ExactArgs(1),
		Long: `Drain asks the leader coordinator to lease nothing more to the worker
(within a heartbeat interval). Its running jobs finish; the worker stays up,
idle, until it is stopped. The request stands, through crashes and restarts
under the same id, until "dtsctl workers undrain" (or a clean stop).`,
		Example: `  dtsctl workers drain w1`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			w, err := a.c.DrainWorker(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.output == "table" && !a.quiet {
				_, err = fmt.Fprintf(a.env.Stdout, "%s: drain requested (state %s, %d running)\n", w.WorkerID, w.State, w.InFlight)
				return err
			}
			return emitOne(a, w, w.WorkerID, nil)
		}),
	}
}

func (a *app) workersUndrainCmd() *cobra.Command {
	return &cobra.Command{
		Use: "undrain ID", Short: "Withdraw a drain request: the worker gets jobs again", Args: cobra.ExactArgs(1),
		Long: `Undrain withdraws an operator's drain request (dtsctl workers drain, the
console's Drain): the leader coordinator leases to the worker again from its
next worker sync (within a heartbeat interval). A worker that drains itself
because it is shutting down (SIGTERM) goes on stopping.`,
		Example: `  dtsctl workers undrain w1`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			w, err := a.c.UndrainWorker(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.output == "table" && !a.quiet {
				_, err = fmt.Fprintf(a.env.Stdout, "%s: drain withdrawn (state %s, %d running)\n", w.WorkerID, w.State, w.InFlight)
				return err
			}
			return emitOne(a, w, w.WorkerID, nil)
		}),
	}
}

func (a *app) operationsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "operations", Aliases: []string{"ops"}, Short: "Background bulk operations: progress and cancel"}
	ls := &cobra.Command{
		Use: "ls", Aliases: []string{"list"}, Short: "List the newest operations", Args: cobra.NoArgs,
		Example: `  dtsctl operations ls`,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			ops, err := a.c.Operations(cmd.Context())
			if err != nil {
				return err
			}
			return emit(a, listing[client.Operation]{
				whole: map[string]any{"operations": ops}, items: ops,
				id:     func(o client.Operation) string { return o.OperationID },
				header: []string{"ID", "ACTION", "STATE", "MATCHED", "PROCESSED", "AFFECTED", "STARTED", "BY"},
				row: func(o client.Operation) []string {
					return []string{o.OperationID, o.Action, o.State, itoa(o.Matched), itoa(o.Processed), itoa(o.Affected),
						fmtTime(o.CreatedAt), clip(o.Actor, 30)}
				},
			})
		}),
	}
	get := &cobra.Command{
		Use: "get ID", Short: "Show an operation's progress", Args: cobra.ExactArgs(1),
		Example: `  dtsctl operations get 3`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			o, err := a.c.Operation(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return emitOperation(a, o)
		}),
	}
	cancel := &cobra.Command{
		Use: "cancel ID", Short: "Cancel a running operation (the batches done stay done)", Args: cobra.ExactArgs(1),
		Example: `  dtsctl operations cancel 3`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			o, err := a.c.CancelOperation(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return emitOperation(a, o)
		}),
	}
	return group(cmd, ls, get, cancel)
}

func emitOperation(a *app, o *client.Operation) error {
	filter := strings.Join(o.Statuses, ",")
	if o.Name != "" {
		filter += " name=" + o.Name
	}
	if o.Queue != "" {
		filter += " queue=" + o.Queue
	}
	fields := [][2]string{{"ID", o.OperationID}, {"ACTION", o.Action}, {"FILTER", filter},
		{"STATE", o.State}, {"MATCHED", itoa(o.Matched)}, {"PROCESSED", itoa(o.Processed)}, {"AFFECTED", itoa(o.Affected)},
		{"STARTED BY", o.Actor}, {"STARTED", fmtTime(o.CreatedAt)}, {"ENDED", fmtOptTime(o.FinishedAt)}}
	if o.CanceledBy != "" {
		fields = append(fields, [2]string{"CANCELED BY", o.CanceledBy})
	}
	if o.Error != "" {
		fields = append(fields, [2]string{"ERROR", o.Error})
	}
	return emitOne(a, o, o.OperationID, fields)
}
