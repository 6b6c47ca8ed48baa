package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dtsched/dts/internal/envconf"
	"github.com/dtsched/dts/submitter/app"

	"github.com/dtsched/dts/internal/auth"
)

const tokenUsage = `usage:
  submitter token create -name NAME -scope submit[,read,admin] [-ttl 720h]   print a new API key (once)
  submitter token list                                                        list keys (never the keys themselves)
  submitter token revoke ID                                                   revoke a key; servers refuse it within 5 s
Each takes -database-url (DATABASE_URL). Keys work on submitters started with AUTH_API_KEYS=true.`

// tokenCommand runs "submitter token ...": API key management straight in
// PostgreSQL, without a running server. A new key is the only thing written
// to stdout, so that KEY=$(submitter token create ...) works.
func tokenCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, tokenUsage)
		return errors.New("token: missing subcommand")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("submitter token "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database-url", (&envconf.Env{}).String("DATABASE_URL", envconf.DefaultDatabaseURL), "PostgreSQL URL (DATABASE_URL)")
	var name, scope string
	var ttl time.Duration
	switch sub {
	case "create":
		fs.StringVar(&name, "name", "", "what the key is for (required)")
		fs.StringVar(&scope, "scope", "", "scopes, comma-separated: submit, read, admin (required)")
		fs.DurationVar(&ttl, "ttl", app.DefaultTokenTTL, "lifetime; 0 for a key that never expires")
	case "list", "revoke":
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, tokenUsage)
		return nil
	default:
		fmt.Fprintln(stderr, tokenUsage)
		return fmt.Errorf("token: unknown subcommand %q", sub)
	}
	// Accept "revoke ID -database-url X" as well as "revoke -database-url X ID".
	var positional []string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		positional, args = args[:1], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	positional = append(positional, fs.Args()...)

	var id int64
	switch sub {
	case "create":
		if name == "" || scope == "" {
			return errors.New("token create: -name and -scope are required")
		}
		if _, err := auth.ParseScopes(scope); err != nil {
			return fmt.Errorf("token create: -scope: %w", err)
		}
		if len(positional) > 0 {
			return fmt.Errorf("token create: unexpected arguments %v", positional)
		}
	case "list":
		if len(positional) > 0 {
			return fmt.Errorf("token list: unexpected arguments %v", positional)
		}
	case "revoke":
		if len(positional) != 1 {
			return errors.New("token revoke: want exactly one token id")
		}
		var err error
		if id, err = strconv.ParseInt(positional[0], 10, 64); err != nil || id <= 0 {
			return fmt.Errorf("token revoke: %q is not a token id", positional[0])
		}
	}

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	admin, err := app.OpenTokenAdmin(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	actor := cliActor()
	switch sub {
	case "create":
		scopes, _ := auth.ParseScopes(scope)
		t, err := admin.Create(ctx, actor, name, scopes, ttl)
		if err != nil {
			return fmt.Errorf("token create: %w", err)
		}
		expires := "never"
		if t.ExpiresAt != nil {
			expires = t.ExpiresAt.Format(time.RFC3339)
		}
		fmt.Fprintf(stderr, "created token %s %q, scopes %s, expires %s. The key below is shown once: store it now.\n",
			t.ID, t.Name, strings.Join(t.Scopes, ","), expires)
		fmt.Fprintln(stdout, t.Key)
	case "list":
		ts, err := admin.List(ctx)
		if err != nil {
			return fmt.Errorf("token list: %w", err)
		}
		tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tCREATED\tEXPIRES\tREVOKED\tLAST USED")
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, strings.Join(t.Scopes, ","),
				t.CreatedAt.Format(time.RFC3339), when(t.ExpiresAt, "never"), when(t.RevokedAt, "-"), when(t.LastUsedAt, "never"))
		}
		return tw.Flush()
	case "revoke":
		t, err := admin.Revoke(ctx, actor, id)
		if err != nil {
			return fmt.Errorf("token revoke %d: %w", id, err)
		}
		fmt.Fprintf(stdout, "revoked token %s %q at %s\n", t.ID, t.Name, t.RevokedAt.Format(time.RFC3339))
	}
	return nil
}

func when(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return t.Format(time.RFC3339)
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
