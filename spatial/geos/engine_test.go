//go:build cgo

package geos

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/benchcorpus"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/validity/validitytest"
	"github.com/geodlq/geodlq/spatial"
)

// The differential tests of the two validity engines: for every input the
// pure-Go engine (the default) must give the GEOS engine's answer, the
// whole of it: the Result, and the error's class, stage, reason, kind,
// location, fault index, geometry type, vertex count, EPSG code and text.

// engines returns a checker of each engine with the same options.
func engines(t testing.TB, opts *spatial.Options) (goC, geosC *spatial.Checker) {
	t.Helper()
	var o spatial.Options
	if opts != nil {
		o = *opts
	}
	o.Engine = spatial.EngineGo
	goC = newChecker(t, &o)
	o.Engine = spatial.EngineGEOS
	geosC = newChecker(t, &o)
	return goC, geosC
}

// verdict is everything CheckEvent or CheckGeometry says, comparable.
type verdict struct {
	Result spatial.Result
	Error  string
	Class  classify.Class
	Stage  classify.Stage
	Detail *classify.GeometryDetail
}

func verdictOf(res spatial.Result, err error) verdict {
	v := verdict{Result: res}
	if err == nil {
		return v
	}
	v.Error = err.Error()
	var ce *classify.Error
	if errors.As(err, &ce) {
		v.Class, v.Stage, v.Detail = ce.Class, ce.Stage, ce.Geometry
	}
	return v
}

func (v verdict) String() string {
	b, _ := json.Marshal(v)
	return string(b)
}

// agreeEvent fails t unless both engines answer payload alike; it returns
// the answer.
func agreeEvent(t testing.TB, name string, goC, geosC *spatial.Checker, payload []byte) verdict {
	t.Helper()
	want := verdictOf(geosC.CheckEvent(payload))
	got := verdictOf(goC.CheckEvent(payload))
	if want.String() != got.String() {
		t.Errorf("%s: engines differ\nGEOS: %s\nGo:   %s", name, want, got)
	}
	return want
}

// agreeGeometry is agreeEvent for CheckGeometry.
func agreeGeometry(t testing.TB, name string, goC, geosC *spatial.Checker, geometry []byte) verdict {
	t.Helper()
	want := verdictOf(spatial.Result{}, geosC.CheckGeometry(geometry))
	got := verdictOf(spatial.Result{}, goC.CheckGeometry(geometry))
	if want.String() != got.String() {
		t.Errorf("%s: engines differ\nGEOS: %s\nGo:   %s", name, want, got)
	}
	return want
}

// tally counts verdicts by reason kind.
type tally map[string]int

func (c tally) add(v verdict) {
	switch {
	case v.Detail != nil:
		c[string(v.Detail.Kind)]++
	case v.Error != "":
		c["error"]++
	default:
		c["valid"]++
	}
}

func TestEngineDefaultsToGo(t *testing.T) {
	c := newChecker(t, nil)
	require.Equal(t, spatial.EngineGo, c.Options().Engine)
	require.Equal(t, "go", spatial.EngineGo.String())
	require.Equal(t, "geos", spatial.EngineGEOS.String())
	_, err := spatial.NewChecker(&spatial.Options{Engine: spatial.EngineGEOS + 1})
	require.ErrorContains(t, err, "unknown validity engine")
}

// TestEnginesAgreeOnCorpus: the shared corpus, the fuzz seeds and the
// fuzzers' stored inputs.
func TestEnginesAgreeOnCorpus(t *testing.T) {
	goC, geosC := engines(t, nil)
	seen := tally{}
	for _, it := range corpus.All() {
		seen.add(agreeEvent(t, it.Name, goC, geosC, it.Payload))
	}
	for i, s := range corpus.GeometrySeeds {
		seen.add(agreeGeometry(t, fmt.Sprintf("seed %d", i), goC, geosC, []byte(s)))
		seen.add(agreeEvent(t, fmt.Sprintf("seed %d as event", i), goC, geosC, []byte(`{"crs":"EPSG:4326","geometry":`+s+`}`)))
	}
	files, err := filepath.Glob("../testdata/fuzz/*/*")
	require.NoError(t, err)
	for _, f := range files {
		data := readFuzzInput(t, f)
		seen.add(agreeGeometry(t, f, goC, geosC, data))
		seen.add(agreeEvent(t, f, goC, geosC, data))
	}
	t.Logf("verdicts: %v", seen)
	require.Greater(t, seen["valid"], 5)
	require.Greater(t, seen[string(classify.KindSelfIntersection)], 0)
}

// readFuzzInput reads a one-argument []byte file of Go's fuzzing corpus.
func readFuzzInput(t testing.TB, path string) []byte {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.SplitN(string(data), "\n", 3)
	require.Equal(t, "go test fuzz v1", lines[0], path)
	arg := strings.TrimSpace(lines[1])
	require.True(t, strings.HasPrefix(arg, "[]byte(") && strings.HasSuffix(arg, ")"), path)
	s, err := strconv.Unquote(arg[len("[]byte(") : len(arg)-1])
	require.NoError(t, err, path)
	return []byte(s)
}

// TestEnginesAgreeOnHostile: every hostile event family, at the smallest
// size and at 1 MiB for those that scale (the large ones, million-position
// rings and ten thousand holes, at their own size).
func TestEnginesAgreeOnHostile(t *testing.T) {
	goC, geosC := engines(t, nil)
	seen := tally{}
	for _, f := range corpus.Hostile() {
		if f.Input != corpus.InputEvent {
			continue
		}
		sizes := []int{corpus.MinHostileSize}
		if f.Scales {
			sizes = append(sizes, 1<<20)
		}
		for _, size := range sizes {
			s := f.Generate(size)
			seen.add(agreeEvent(t, fmt.Sprintf("%s at %d bytes", f.Name, size), goC, geosC, s.Data))
		}
	}
	t.Logf("verdicts: %v", seen)
}

// TestEnginesAgreeOnXMLTester: GEOS's xmltester isValid cases
// (internal/validity/testdata), as events.
func TestEnginesAgreeOnXMLTester(t *testing.T) {
	goC, geosC := engines(t, nil)
	f, err := os.Open("../../internal/validity/testdata/geos-xmltester.jsonl")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	seen := tally{}
	for sc.Scan() {
		var c struct {
			Case     string          `json:"case"`
			Geometry json.RawMessage `json:"geometry"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &c))
		// A Cartesian CRS: xmltester coordinates are not lon/lat.
		payload := append([]byte(`{"crs":"EPSG:3857","geometry":`), c.Geometry...)
		payload = append(payload, '}')
		seen.add(agreeGeometry(t, c.Case, goC, geosC, c.Geometry))
		agreeEvent(t, c.Case, goC, geosC, payload)
	}
	require.NoError(t, sc.Err())
	t.Logf("verdicts: %v", seen)
	require.Greater(t, seen["valid"]+seen[string(classify.KindSelfIntersection)], 500)
}

// TestEnginesAgreeOnGenerated: geometries from the differential
// generator, as geometries and as events.
func TestEnginesAgreeOnGenerated(t *testing.T) {
	goC, geosC := engines(t, &spatial.Options{ExpectedEPSG: 3857})
	n := 5000
	if testing.Short() {
		n = 500
	}
	rng := rand.New(rand.NewPCG(5, 6))
	prog := make([]byte, 256)
	seen := tally{}
	for range n {
		for j := 0; j < len(prog); j += 8 {
			binary.LittleEndian.PutUint64(prog[j:], rng.Uint64())
		}
		g := validitytest.GeoJSON(prog)
		seen.add(agreeGeometry(t, fmt.Sprintf("program %x", prog), goC, geosC, g))
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("verdicts: %v", seen)
}

// TestEnginesAgreeOnBenchCorpus: the benchmark corpus of Natural Earth
// countries, their corruptions and the 40 MB land MultiPolygon
// (scripts/bench-corpus.sh generates it, npm installs world-atlas).
func TestEnginesAgreeOnBenchCorpus(t *testing.T) {
	goC, geosC := engines(t, nil)
	path := benchcorpus.Ensure(t)
	seen := tally{}
	for i, e := range benchcorpus.Load(t, path) {
		seen.add(agreeEvent(t, fmt.Sprintf("event %d (%d bytes)", i+1, len(e)), goC, geosC, e))
	}
	t.Logf("verdicts: %v", seen)
	require.Greater(t, seen["valid"], 600)
}

// FuzzEnginesAgree is the check path's differential fuzz target: the first
// byte chooses between a geometry the generator (validitytest) builds from
// the rest, checked as a geometry and inside an event, and the bytes
// themselves as an event; both engines must give the same answer in every
// respect. The generator makes polygons, multipolygons, holes, collections,
// repeated and near-collinear points and huge and tiny coordinates; the
// fuzzer mutates them by mutating its program.
func FuzzEnginesAgree(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 48 {
		prog := make([]byte, 1+64+rng.IntN(192))
		for j := range prog {
			prog[j] = byte(rng.Uint32())
		}
		prog[0] &^= 1
		f.Add(prog)
	}
	for _, it := range corpus.All() {
		f.Add(append([]byte{1}, it.Payload...))
	}
	goC, geosC := engines(f, &spatial.Options{MaxVertices: 100_000, MaxBytes: 1 << 20})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		if data[0]&1 == 1 {
			agreeEvent(t, "event", goC, geosC, data[1:])
			return
		}
		g := validitytest.GeoJSON(data[1:])
		agreeGeometry(t, "geometry", goC, geosC, g)
		var ev bytes.Buffer
		ev.WriteString(`{"crs":"EPSG:4326","geometry":`)
		ev.Write(g)
		ev.WriteString(`}`)
		agreeEvent(t, "event", goC, geosC, ev.Bytes())
	})
}
