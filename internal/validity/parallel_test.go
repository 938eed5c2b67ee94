package validity

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/internal/validity/validitytest"
)

// TestParallelSweepAgrees runs the sweep and the nested-shell test on
// several goroutines over small geometries (the thresholds lowered, the
// chunks a few chains) and holds them to the sequential answer; under the race detector it also shows the
// workers share nothing they write.
func TestParallelSweepAgrees(t *testing.T) {
	defer func(n, c, p int) {
		parallelMinChains, sweepChunkSize, parallelMinPolygons = n, c, p
	}(parallelMinChains, sweepChunkSize, parallelMinPolygons)
	parallelMinChains, sweepChunkSize, parallelMinPolygons = 2, 3, 2
	rng := rand.New(rand.NewPCG(11, 12))
	prog := make([]byte, 512)
	var seq, par Validator
	checked := 0
	kinds := map[string]int{}
	for range 6000 {
		for j := 0; j < len(prog); j += 8 {
			binary.LittleEndian.PutUint64(prog[j:], rng.Uint64())
		}
		g, err := geojson.ParseGeometry(validitytest.GeoJSON(prog), geojson.Limits{})
		if err != nil || geojson.Validate(g) != nil {
			continue
		}
		want, werr := seq.Check(g.Geom, nil)
		got, gerr := par.Check(g.Geom, &Options{Workers: 4})
		checked++
		kinds[want.message()]++
		if reason(want, werr) != reason(got, gerr) {
			t.Errorf("program %x: sequential %q, parallel %q", prog, reason(want, werr), reason(got, gerr))
		}
	}
	if checked < 1000 || kinds[messages[codeNestedShells]] < 20 || kinds[messages[codeDisconnected]] < 20 {
		t.Fatalf("only %d geometries checked: %v", checked, kinds)
	}
}

func reason(f *Fault, err error) string {
	switch {
	case err != nil:
		return "error: " + err.Error()
	case f == nil:
		return "valid"
	}
	return f.Reason()
}

func (f *Fault) message() string {
	if f == nil {
		return "valid"
	}
	return f.Message
}
