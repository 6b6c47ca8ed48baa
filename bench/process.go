package bench

import (
	"context"
	"fmt"

	"github.com/dtsched/dts/devcluster/process"
)

// proc is one service process the bench started through the cluster
// harness (devcluster/process): it dies with the bench and not before.
type proc struct {
	*process.Process
	// workerIDs are the ids of the workers it runs (a worker process one,
	// a fleetworker many); none for the other services.
	workerIDs []string
	// pprofAddr is its PPROF_ADDR when the bench profiles (ProfileDir).
	pprofAddr string
}

// waitHealthy waits up to startTimeout for p's /healthz to answer 200 with
// a body that check, when set, accepts.
func (p *proc) waitHealthy(ctx context.Context, check func(body []byte) bool) error {
	ctx, cancel := context.WithTimeoutCause(ctx, startTimeout, fmt.Errorf("not healthy after %v", startTimeout))
	defer cancel()
	return p.WaitHealthy(ctx, check)
}

// buildBinaries builds the three services and the fleetworker, without
// -race and without DWARF (-w: nobody debugs them, and writing it was a
// good part of the link), into dir. The go command must run inside the dts workspace.
func buildBinaries(ctx context.Context, dir string) error {
	var pkgs []string
	for _, cmd := range []string{"submitter/cmd/submitter", "coordinator/cmd/coordinator", "worker/cmd/worker", "bench/cmd/fleetworker"} {
		pkgs = append(pkgs, "github.com/dtsched/dts/"+cmd)
	}
	if err := process.Build(ctx, dir, []string{"-ldflags=-w"}, pkgs...); err != nil {
		return fmt.Errorf("%w(run the bench from the dts workspace, or pass -bin-dir)", err)
	}
	return nil
}
