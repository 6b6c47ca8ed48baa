package command

import (
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is what dtsctl version prints: the build of this dtsctl, as the
// Go toolchain recorded it. The API reports no version of the submitter,
// so there is none of the server's to print.
type Version struct {
	// Module is the dtsctl module's version: a tag for go install
	// ...@vX.Y.Z, "(devel)" for a build from a checkout.
	Module string `json:"module"`
	// Revision is the VCS commit the binary was built from, Time its
	// commit time, Modified whether the tree held uncommitted changes;
	// empty when the build recorded none (go run, -buildvcs=false, a
	// build from a Go workspace's root without -buildvcs=true).
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Go is the toolchain that built it.
	Go string `json:"go"`
}

// buildVersion reads the binary's build information.
func buildVersion() Version {
	v := Version{Module: "unknown", Go: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Go = bi.GoVersion
	v.Module = orDash(bi.Main.Version)
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print dtsctl's version, commit and Go version",
		Long: `Print dtsctl's module version, the commit it was built from (and whether the tree
had uncommitted changes) and the Go version that built it. The API does not report the
submitter's version, so only dtsctl's own is printed; it needs no server.`,
		Example: `  dtsctl version
  dtsctl version -o json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			v := buildVersion()
			modified := "no"
			if v.Modified {
				modified = "yes"
			}
			return emitOne(a, v, v.Module, [][2]string{{"VERSION", v.Module}, {"REVISION", orDash(v.Revision)},
				{"COMMIT TIME", orDash(v.Time)}, {"MODIFIED", modified}, {"GO", v.Go}})
		}),
	}
}
