// Package command is dtsctl: the command tree, its configuration
// (flags, DTSCTL_* variables, profiles) and its output formats. It speaks
// to the submitter only through the public HTTP API, by the Go client,
// so whatever dtsctl does a program can do too.
//
// What must stay true: every read accepts -o table|json|jsonl and -q; the
// JSON of a read is the API's answer (decoded and encoded again, the same
// fields and values); exit codes are those of the Exit* constants, so
// scripts can tell a missing job (3) and a refused token (4) from any
// other failure (1) and from a mistyped command (2).
package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/dtsched/dts/client"
)

// Exit codes.
const (
	ExitOK       = 0
	ExitError    = 1 // any other failure
	ExitUsage    = 2 // a bad command line
	ExitNotFound = 3 // the job, worker or key does not exist
	ExitAuth     = 4 // the token is missing, refused or lacks the scope
)

// Defaults of the global flags.
const (
	DefaultServer   = client.DefaultBaseURL
	DefaultOutput   = "table"
	DefaultInterval = 2 * time.Second
)

// Env is what dtsctl takes from its process: streams and environment.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads a variable (os.Getenv in main); nil reads none.
	Getenv func(string) string
}

func (e Env) getenv(k string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(k)
}

// usageError is a bad command line (ExitUsage).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// runError marks an error returned by a command's own code, as opposed
// to one cobra returns for the command line (which is ExitUsage).
type runError struct{ err error }

func (e runError) Error() string { return e.err.Error() }
func (e runError) Unwrap() error { return e.err }

// ExitCode maps an error of Main's command tree to an exit code.
func exitCode(err error) int {
	var run runError
	if !errors.As(err, &run) {
		return ExitUsage // from cobra: unknown command or flag, wrong arguments
	}
	var u usageError
	switch {
	case errors.As(err, &u):
		return ExitUsage
	case errors.Is(err, client.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrForbidden):
		return ExitAuth
	}
	return ExitError
}

// Main runs dtsctl with args (without the program name) and returns the
// exit code.
func Main(ctx context.Context, args []string, env Env) int {
	root := newRoot(env)
	root.SetArgs(args)
	_, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	fmt.Fprintf(env.Stderr, "dtsctl: %v\n", err)
	if code == ExitUsage {
		fmt.Fprintln(env.Stderr, "Run 'dtsctl --help' for usage.")
	}
	return code
}

// app holds the global options and builds the client once a command runs.
type app struct {
	env                             Env
	server, token, profile, cfgPath string
	output                          string
	quiet                           bool
	c                               *client.Client
}

func newRoot(env Env) *cobra.Command {
	a := &app{env: env}
	root := &cobra.Command{
		Use:   "dtsctl",
		Short: "Operate a dts cluster through the submitter's HTTP API",
		Long: `dtsctl submits, inspects and manages dts jobs, the dead-letter queue, queues,
schedules, workers and API keys, through the submitter's public HTTP API.

Server and token come from --server/--token, else DTSCTL_SERVER/DTSCTL_TOKEN,
else the profile (--profile, DTSCTL_PROFILE, or the file's current-profile) of
~/.config/dtsctl/config.yaml (--config, DTSCTL_CONFIG), else ` + DefaultServer + `.

Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 authentication or scope.`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.setup(cmd) },
	}
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	f := root.PersistentFlags()
	f.StringVar(&a.server, "server", "", "submitter URL (default DTSCTL_SERVER, the profile's, or "+DefaultServer+")")
	f.StringVar(&a.token, "token", "", "API key or JWT (default DTSCTL_TOKEN or the profile's)")
	f.StringVar(&a.profile, "profile", "", "profile of the config file (default DTSCTL_PROFILE or its current-profile)")
	f.StringVar(&a.cfgPath, "config", "", "config file (default DTSCTL_CONFIG or ~/.config/dtsctl/config.yaml)")
	f.StringVarP(&a.output, "output", "o", DefaultOutput, "output format: table, json or jsonl")
	f.BoolVarP(&a.quiet, "quiet", "q", false, "print ids only")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "jsonl"}, cobra.ShellCompDirectiveNoFileComp))

	root.AddCommand(a.submitCmd(), a.jobsCmd(), a.dlqCmd(), a.queuesCmd(), a.limitsCmd(), a.workersCmd(), a.statsCmd(),
		a.topCmd(), a.tokenCmd(), a.auditCmd(), a.operationsCmd(), a.schedulesCmd(), a.versionCmd())
	return root
}

// group makes cmd a command that only holds subcommands: with none named,
// it prints its help; an unknown one is a usage error (cobra would print
// the help and exit 0).
func group(cmd *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return cmd.Help()
	}
	cmd.AddCommand(subs...)
	return cmd
}

// run wraps a command's code so that its errors are told from cobra's.
func run(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := f(cmd, args); err != nil {
			return runError{err}
		}
		return nil
	}
}

// Config is the file ~/.config/dtsctl/config.yaml:
//
//	current-profile: prod
//	profiles:
//	  prod: {server: https://dts.example.com, token: dts_...}
//	  local: {server: http://127.0.0.1:8000}
type Config struct {
	CurrentProfile string             `yaml:"current-profile"`
	Profiles       map[string]Profile `yaml:"profiles"`
}

// Profile is one server and its token.
type Profile struct {
	Server string `yaml:"server"`
	Token  string `yaml:"token"`
}

func (a *app) setup(cmd *cobra.Command) error {
	if cmd.Name() == "completion" || cmd.HasParent() && cmd.Parent().Name() == "completion" ||
		cmd.Name() == cobra.ShellCompRequestCmd || cmd.Name() == cobra.ShellCompNoDescRequestCmd {
		return nil
	}
	if cmd.Name() == "version" && cmd.Parent() == cmd.Root() {
		return a.checkOutput() // needs no server, token or config file
	}
	if err := a.checkOutput(); err != nil {
		return err
	}
	prof, err := a.loadProfile()
	if err != nil {
		return runError{err}
	}
	server := first(a.server, a.env.getenv("DTSCTL_SERVER"), prof.Server, DefaultServer)
	token := first(a.token, a.env.getenv("DTSCTL_TOKEN"), prof.Token)
	c, err := client.New(client.Config{BaseURL: server, Token: token, UserAgent: "dtsctl"})
	if err != nil {
		return runError{usageError{err}}
	}
	a.c = c
	return nil
}

func (a *app) checkOutput() error {
	switch a.output {
	case "table", "json", "jsonl":
		return nil
	}
	return runError{usagef("--output %q: must be table, json or jsonl", a.output)}
}

func (a *app) loadProfile() (Profile, error) {
	path := first(a.cfgPath, a.env.getenv("DTSCTL_CONFIG"))
	explicit := path != ""
	if !explicit {
		dir := a.env.getenv("XDG_CONFIG_HOME")
		if dir == "" {
			if home := a.env.getenv("HOME"); home != "" {
				dir = filepath.Join(home, ".config")
			}
		}
		if dir == "" {
			return Profile{}, nil
		}
		path = filepath.Join(dir, "dtsctl", "config.yaml")
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return Profile{}, nil
	}
	if err != nil {
		return Profile{}, fmt.Errorf("config: %w", err)
	}
	var cfg Config
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return Profile{}, fmt.Errorf("config %s: %w", path, err)
	}
	name := first(a.profile, a.env.getenv("DTSCTL_PROFILE"), cfg.CurrentProfile)
	if name == "" {
		return Profile{}, nil
	}
	p, ok := cfg.Profiles[name]
	if !ok {
		return Profile{}, usagef("config %s: no profile %q", path, name)
	}
	return p, nil
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
