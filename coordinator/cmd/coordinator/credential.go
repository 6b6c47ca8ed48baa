package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/dtsched/dts/internal/envconf"

	"github.com/dtsched/dts/coordinator"
)

const credentialUsage = `usage:
  coordinator worker-credential create -worker-id ID   print a new credential for worker ID (once)
  coordinator worker-credential list                   list credentials (never the secrets)
  coordinator worker-credential revoke -worker-id ID   revoke every credential of worker ID
Each takes -database-url (DATABASE_URL). Give the secret to the worker as WORKER_CREDENTIAL.`

// credentialCommand runs "coordinator worker-credential ...". A new secret
// is the only thing written to stdout, so that
// WORKER_CREDENTIAL=$(coordinator worker-credential create -worker-id w1) works.
func credentialCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, credentialUsage)
		return errors.New("worker-credential: missing subcommand")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("coordinator worker-credential "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database-url", (&envconf.Env{}).String("DATABASE_URL", envconf.DefaultDatabaseURL), "PostgreSQL URL [DATABASE_URL]")
	workerID := fs.String("worker-id", "", "the worker's id (WORKER_ID)")
	switch sub {
	case "create", "revoke", "list":
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, credentialUsage)
		return nil
	default:
		fmt.Fprintln(stderr, credentialUsage)
		return fmt.Errorf("worker-credential: unknown subcommand %q", sub)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("worker-credential %s: unexpected arguments %v", sub, fs.Args())
	}
	if sub != "list" && *workerID == "" {
		return fmt.Errorf("worker-credential %s: -worker-id is required", sub)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	admin, err := coordinator.OpenCredentialAdmin(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	switch sub {
	case "create":
		secret, cred, err := admin.Create(ctx, cliActor(), *workerID)
		if err != nil {
			return fmt.Errorf("worker-credential create: %w", err)
		}
		fmt.Fprintf(stderr, "created credential %d for worker %q. The secret below is shown once: give it to the worker as WORKER_CREDENTIAL.\n",
			cred.ID, cred.WorkerID)
		fmt.Fprintln(stdout, secret)
	case "list":
		cs, err := admin.List(ctx)
		if err != nil {
			return fmt.Errorf("worker-credential list: %w", err)
		}
		tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tWORKER\tCREATED\tREVOKED")
		for _, c := range cs {
			revoked := "-"
			if c.RevokedAt != nil {
				revoked = c.RevokedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", c.ID, c.WorkerID, c.CreatedAt.Format(time.RFC3339), revoked)
		}
		return tw.Flush()
	case "revoke":
		n, err := admin.Revoke(ctx, cliActor(), *workerID)
		if err != nil {
			return fmt.Errorf("worker-credential revoke: %w", err)
		}
		fmt.Fprintf(stdout, "revoked %d credential(s) of worker %q; the leader refuses its heartbeats within seconds\n", n, *workerID)
	}
	return nil
}

// cliActor names the person running a subcommand in the audit log.
func cliActor() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	return "cli:" + name
}
