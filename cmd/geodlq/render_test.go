package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/corpus"
)

// oneEvent returns a cli on a store into which check --dead-letter wrote
// the given events.
func oneEvent(t *testing.T, payloads ...[]byte) cli {
	t.Helper()
	dir := t.TempDir()
	c := cli{t: t, store: "sqlite://" + filepath.Join(dir, "dlq.db"), blobs: "file://" + filepath.Join(dir, "blobs")}
	c.must(exitProblems, bytes.Join(payloads, []byte("\n")), "check", "--dead-letter", "parcels", "--max-vertices", "5000")
	return c
}

// TestRenderBowtieGolden compares the bowtie's drawing with
// testdata/bowtie.svg (go test -run TestRenderBowtieGolden -update
// rewrites it): the polygon, the segment 0-1 that the self-intersection
// lies on in red with its vertex numbers, the location circled, and the
// reason as a caption.
func TestRenderBowtieGolden(t *testing.T) {
	t.Parallel()
	bowtie, _ := corpus.Lookup("bowtie")
	c := oneEvent(t, bytes.TrimSpace(bowtie.Payload))
	got := c.must(exitOK, nil, "render", "evt-9", "-").stdout
	golden := filepath.Join("testdata", "bowtie.svg")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), got)
	require.Equal(t, 2, strings.Count(got, `stroke="#d7191c" stroke-width="4"`), "both crossing segments are drawn in red")
	require.Contains(t, got, ">Self-intersection[0.5 0.5]</text>")
	require.Contains(t, got, ">at (0.5 0.5) ring 0 segment 0-1</text>")

	// Written to a file, the same bytes.
	out := filepath.Join(t.TempDir(), "bowtie.svg")
	c.must(exitOK, nil, "render", "parcels.poison.dlt/1", out)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, got, string(b))
}

func TestRenderCases(t *testing.T) {
	t.Parallel()
	unclosed, _ := corpus.Lookup("unclosed_ring")
	nan, _ := corpus.Lookup("nan_coordinates")
	missing, _ := corpus.Lookup("null_geometry")
	c := oneEvent(t, bytes.TrimSpace(unclosed.Payload), bytes.TrimSpace(nan.Payload), bytes.TrimSpace(missing.Payload),
		[]byte(largeEvent("evt-big")))

	svg := c.must(exitOK, nil, "render", "evt-unclosed-ring", "-").stdout
	require.Contains(t, svg, `stroke-dasharray="7 5"`, "the missing closing segment is dashed")
	require.Contains(t, svg, ">missing closing segment</text>")
	require.Contains(t, svg, ">at (10 10) ring 0 vertex 0</text>")

	svg = c.must(exitOK, nil, "render", "evt-nan", "-").stdout
	require.Contains(t, svg, ">vertex 2 not finite</text>", "the NaN vertex is placed between its neighbours")

	r := c.must(exitProblems, nil, "render", "evt-null-geometry", "-")
	require.Contains(t, r.stderr, "no geometry to draw")

	svg = c.must(exitOK, nil, "render", "evt-big", "-").stdout
	require.Contains(t, svg, "MultiPolygon")
	noBlobs := c
	noBlobs.blobs = ""
	r = noBlobs.must(exitUsage, nil, "render", "evt-big", "-")
	require.Contains(t, r.stderr, "pass --blobs")
}

// TestRenderPNG converts with rsvg-convert when it is installed and says
// clearly what to install when it is not.
func TestRenderPNG(t *testing.T) {
	t.Parallel()
	bowtie, _ := corpus.Lookup("bowtie")
	c := oneEvent(t, bytes.TrimSpace(bowtie.Payload))
	out := filepath.Join(t.TempDir(), "bowtie.png")
	if _, err := exec.LookPath(svgConverter); err == nil {
		c.must(exitOK, nil, "render", "evt-9", "--png", out)
		b, err := os.ReadFile(out)
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")), "a PNG file")
	} else {
		t.Logf("%s is not installed: checking the error only", svgConverter)
	}
	noConv := c
	noConv.env = []string{"PATH=" + t.TempDir()}
	r := noConv.must(exitStore, nil, "render", "evt-9", out+".2.png")
	require.Contains(t, r.stderr, "apt-get install librsvg2-bin")
	require.NoFileExists(t, out+".2.png")
}
