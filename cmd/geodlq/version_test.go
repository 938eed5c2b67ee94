package main

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBuildVersion(t *testing.T) {
	mainMod := debug.Module{Path: "github.com/geodlq/geodlq/cmd/geodlq", Version: "v0.1.0"}
	cases := []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want versionReport
	}{
		{"installed at a tag", &debug.BuildInfo{GoVersion: "go1.26.8", Main: mainMod},
			true, versionReport{Module: mainMod.Path, Version: "v0.1.0", Go: "go1.26.8"}},
		{"built in a checkout", &debug.BuildInfo{GoVersion: "go1.25.4", Main: debug.Module{Path: mainMod.Path, Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "c9bea1f0"}, {Key: "vcs.time", Value: "2026-12-03T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			true, versionReport{Module: mainMod.Path, Version: "(devel)", Commit: "c9bea1f0", CommitTime: "2026-12-03T10:00:00Z", Modified: true, Go: "go1.25.4"}},
		{"no main version", &debug.BuildInfo{Main: debug.Module{Path: mainMod.Path}},
			true, versionReport{Module: mainMod.Path, Version: "(devel)", Go: runtime.Version()}},
		{"no build information", nil, false, versionReport{Version: "(unknown)", Go: runtime.Version()}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
			c.want.GEOS, c.want.PROJ = headerVersions()
			require.Equal(t, c.want, buildVersion(c.info, c.ok))
		})
	}
}

// TestVersionCommand runs the built binary: its module, Go and the GEOS
// and PROJ versions of the headers it was built with, as text and JSON.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	c := cli{t: t, store: "sqlite://" + t.TempDir() + "/unused.db"}
	wantGEOS, wantPROJ := headerVersions()

	out := c.must(exitOK, nil, "version").stdout
	require.Regexp(t, `^geodlq (\(devel\)|v[0-9]\S*)\n`, out, "a binary built in a checkout: (devel), or the pseudo-version the go command stamps")
	require.Contains(t, out, "module   github.com/geodlq/geodlq/cmd/geodlq\n")
	require.Contains(t, out, "go       "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n")
	orNone := func(s string) string {
		if s == "" {
			return "(not linked: built without cgo)"
		}
		return s
	}
	require.Contains(t, out, "geos     "+orNone(wantGEOS)+"\n")
	require.Contains(t, out, "proj     "+orNone(wantPROJ)+"\n")

	var r versionReport
	require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, "version", "-o", "json").stdout), &r))
	require.Equal(t, "github.com/geodlq/geodlq/cmd/geodlq", r.Module)
	require.Equal(t, wantGEOS, r.GEOS)
	require.Equal(t, wantPROJ, r.PROJ)
	require.Equal(t, runtime.Version(), r.Go)

	c.must(exitUsage, nil, "version", "extra")
	c.must(exitUsage, nil, "version", "-o", "wide")
}
