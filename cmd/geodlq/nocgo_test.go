package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoCGOBuild builds geodlq with CGO_ENABLED=0 (no GEOS, no PROJ) and
// runs it: checking, dead-lettering and listing work; the commands that
// repair or reproject say they need the cgo build and exit 4
// (docs/cli.md), rather than failing records or labelling geometries.
func TestNoCGOBuild(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "geodlq-nocgo")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "CGO_ENABLED=0 go build: %s", out)

	dir := t.TempDir()
	c := cli{t: t, store: "sqlite://" + filepath.Join(dir, "dlq.db"), blobs: "file://" + filepath.Join(dir, "blobs"), bin: bin}
	r := c.must(exitProblems, seedLines(), "check", "--dead-letter", "parcels", "--max-vertices", "5000", "-")
	require.Contains(t, r.stdout, "invalid_geometry")
	c.must(exitOK, nil, "list")
	const says = "needs the cgo build of geodlq"
	tests := []struct {
		name string
		args []string
	}{
		{"replay --repair", []string{"replay", "--repair", "make-valid", "--target", c.store, "--dry-run"}},
		{"triage", []string{"triage", "--dry-run", "--target", c.store}},
		{"export reprojects EPSG:3857", []string{"export", "--format", "geojson"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.t = t
			r := c.must(exitNeedsCGO, nil, tt.args...)
			require.Contains(t, r.stderr, says)
		})
	}
}
