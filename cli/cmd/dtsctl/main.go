// Command dtsctl operates a dts cluster through the submitter's HTTP API
// (docs/cli.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/dtsched/dts/cli/command"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := command.Main(ctx, os.Args[1:], command.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}
