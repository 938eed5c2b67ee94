package entrypoints_test

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/internal/hostiletest"
	"github.com/geodlq/geodlq/internal/hostiletest/entrypoints"
)

// familySize is the size the scaling families are generated at: the
// default, 32 MiB, half the checker's byte budget, where the 4× term of
// the budget outweighs its fixed 64 MiB; entrypoints.RaceSize (just over
// 4 MiB) with -short and under the race detector (whose budget is then ten
// times the real one). make test runs this package
// without the detector (scripts/test-plain), so the real budget is the one
// checked.
func familySize() int {
	if testing.Short() || raceEnabled {
		return entrypoints.RaceSize
	}
	return corpus.DefaultHostileSize
}

// TestHostileMemory measures each family's peak memory at each entry
// point in a child process (the parent re-executes this test binary once
// per family, several at once; the child runs the stages in turn, returning freed memory to
// the system and resetting the high-water mark before each, and prints
// VmHWM after each): at most 4× the hostile bytes in the process (the
// input, and for replay and triage the dead-letter record in the
// in-process store) plus 64 MiB, for the whole process; and for an entry
// point that hands the geometry to GEOS, what GEOS itself keeps per part
// and per position (hostiletest.GEOSPerPart, GEOSPerVertex).
func TestHostileMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatalf("peak RSS is measured through /proc; run this test on Linux")
	}
	if name, size, ok := hostiletest.Child(); ok {
		memoryChild(t, name, size)
		return
	}
	for _, f := range corpus.Hostile() {
		t.Run(f.Name, func(t *testing.T) {
			// Each child measures its own high-water mark, whatever the
			// others do.
			t.Parallel()
			peaks := childPeaks(t, f, familySize())
			require.Len(t, peaks, len(entrypoints.Stages(f)), "a peak for every stage")
			for _, p := range peaks {
				budget := hostiletest.Budget(int(p.input)) + p.parts*hostiletest.GEOSPerPart + p.vertices*hostiletest.GEOSPerVertex
				if raceEnabled {
					// The race detector's shadow memory: "memory usage may
					// increase by 5-10x" (Go's race detector documentation).
					// A 1 GiB allocation from a claimed size still fails.
					budget *= 10
				}
				t.Logf("%-32s %-22s peak %4d MiB for %4d MiB of input; to GEOS %6d parts, %7d positions (budget %4d MiB)",
					f.Name, p.stage, p.peak>>20, p.input>>20, p.parts, p.vertices, budget>>20)
				require.LessOrEqual(t, p.peak, budget, "%s: peak RSS %d bytes for %d input bytes, %d parts and %d positions", p.stage, p.peak, p.input, p.parts, p.vertices)
			}
		})
	}
}

type stagePeak struct {
	stage                        string
	peak, input, parts, vertices int64
}

var peakLine = regexp.MustCompile(`hostile-peak stage=(\S+) peak=(\d+) input=(\d+) parts=(\d+) vertices=(\d+)`)

func childPeaks(t *testing.T, f corpus.Family, size int) []stagePeak {
	out, _ := hostiletest.RunChild(t, "TestHostileMemory", f, size)
	var peaks []stagePeak
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := peakLine.FindStringSubmatch(sc.Text()); m != nil {
			peak, _ := strconv.ParseInt(m[2], 10, 64)
			input, _ := strconv.ParseInt(m[3], 10, 64)
			parts, _ := strconv.ParseInt(m[4], 10, 64)
			vertices, _ := strconv.ParseInt(m[5], 10, 64)
			peaks = append(peaks, stagePeak{m[1], peak, input, parts, vertices})
		}
	}
	return peaks
}

// geosSize counts the rings, lines and collection members, and the
// positions, of a family's geometry that GEOS may be handed: none when the
// checker refuses the event before topology (its verdict is not
// invalid_geometry or valid).
func geosSize(f corpus.Family, s corpus.Sample) (parts, vertices int) {
	if f.Input != corpus.InputEvent || f.Class.Valid() && f.Class != classify.ClassInvalidGeometry {
		return 0, 0
	}
	ev, err := geojson.ParseEvent(s.Data, geojson.Limits{MaxVertices: -1, MaxParts: -1, MaxHoles: -1})
	if err != nil {
		return 0, 0
	}
	geojson.Components(ev.Geometry.Geom, func(geojson.Component) bool { parts++; return true })
	return parts, ev.Geometry.Vertices
}

// memoryChild runs one family's stages, printing each one's peak.
func memoryChild(t *testing.T, name string, size int) {
	f, ok := corpus.HostileFamily(name)
	require.True(t, ok, name)
	e := entrypoints.NewEnv(t)
	s := f.Generate(size)
	// The family's verdict stands for CheckEvent's error (which
	// internal/hostiletest's TestHostileEntryPoints checks): running
	// CheckEvent here would leave its GEOS memory in the process before the
	// first measurement.
	var cause error
	if f.Input == corpus.InputEvent && f.Class.Valid() {
		reason := "hostile: " + f.Name
		cause = &classify.Error{Class: f.Class, Stage: classify.StageParse, Err: errors.New(reason),
			Geometry: &classify.GeometryDetail{Reason: reason, Kind: cmp.Or(f.Kind, classify.KindOther)}}
	}
	blobs := 0
	for _, b := range s.Blobs {
		blobs += len(b)
	}
	parts, vertices := geosSize(f, s)
	r := e.Family(t, f, s, cause)
	for _, name := range entrypoints.Stages(f) {
		st := r.Prepare(t, name)
		runtime.GC()
		debug.FreeOSMemory()
		require.NoError(t, hostiletest.ResetPeak())
		hostiletest.Within(t, hostiletest.Deadline, f.Name+"/"+name, st.Act)
		peak, err := hostiletest.Peak()
		require.NoError(t, err)
		st.Verify()
		p, v := parts, vertices
		if name == entrypoints.StageRoundTrip || name == entrypoints.StageDecode {
			p, v = 0, 0 // no GEOS
		}
		fmt.Printf("hostile-peak stage=%s peak=%d input=%d parts=%d vertices=%d\n", name, peak, len(s.Data)+blobs+st.Stored, p, v)
	}
	_ = os.Stdout.Sync()
}
