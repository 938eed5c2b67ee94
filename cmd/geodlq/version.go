package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/spatial/geos"
	"github.com/geodlq/geodlq/spatial/proj"
)

// versionReport is what version writes with -o json. Field names are
// stable.
type versionReport struct {
	// Module is the module path of the main package.
	Module string `json:"module"`
	// Version is the module version the binary was built at: "v0.1.0" from
	// `go install …@v0.1.0`, "(devel)" when built in a checkout.
	Version string `json:"version"`
	// Commit is the VCS revision (empty when the go command recorded none:
	// go install …@version, or -buildvcs=false), CommitTime its time, and
	// Modified whether the work tree had uncommitted changes.
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	Modified   bool   `json:"modified,omitempty"`
	// Go is the toolchain that built the binary, Platform its GOOS/GOARCH.
	Go       string `json:"go"`
	Platform string `json:"platform"`
	// GEOS and PROJ are the versions of the C libraries the spatial checks
	// use, as their headers said when the binary was built ("" when built
	// without cgo).
	GEOS string `json:"geos"`
	PROJ string `json:"proj"`
}

// buildVersion reads the binary's build information.
func buildVersion(info *debug.BuildInfo, ok bool) versionReport {
	r := versionReport{Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, GEOS: geos.Version(), PROJ: proj.Version()}
	if !ok || info == nil {
		r.Version = "(unknown)"
		return r
	}
	r.Module, r.Version = info.Main.Path, info.Main.Version
	if r.Version == "" {
		r.Version = "(devel)"
	}
	if info.GoVersion != "" {
		r.Go = info.GoVersion
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			r.Commit = s.Value
		case "vcs.time":
			r.CommitTime = s.Value
		case "vcs.modified":
			r.Modified = s.Value == "true"
		}
	}
	return r
}

func newVersionCmd(a *app) *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print geodlq's version, commit, Go, GEOS and PROJ versions",
		Long: `version prints the module version the binary was built at (v0.1.0 when
installed with go install github.com/geodlq/geodlq/cmd/geodlq@v0.1.0, "(devel)"
when built in a checkout), the commit when the go command recorded one, the Go
toolchain and platform, and the GEOS and PROJ versions its spatial checks were
built against.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.resolve(a, cmd); err != nil {
				return err
			}
			r := buildVersion(debug.ReadBuildInfo())
			if out.json() {
				return writeJSON(a.stdout, r)
			}
			commit := r.Commit
			if commit == "" {
				commit = "(not recorded)"
			} else {
				if r.CommitTime != "" {
					commit += " (" + r.CommitTime + ")"
				}
				if r.Modified {
					commit += ", modified"
				}
			}
			orNone := func(s string) string {
				if s == "" {
					return "(not linked: built without cgo)"
				}
				return s
			}
			_, err := fmt.Fprintf(a.stdout, "geodlq %s\nmodule   %s\ncommit   %s\ngo       %s %s\ngeos     %s\nproj     %s\n",
				r.Version, r.Module, commit, r.Go, r.Platform, orNone(r.GEOS), orNone(r.PROJ))
			return err
		},
	}
	out = addOutput(cmd, fmtTable, fmtJSON)
	return cmd
}
