package validity

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/internal/validity/validitytest"
)

// TestParallelSweepAgrees runs the chain cutting, the sweep and the nested-shell test on
// several goroutines over small geometries (the thresholds lowered, the
// chunks a few chains) and holds them to the sequential answer; under the race detector it also shows the
// workers share nothing they write.
func TestParallelSweepAgrees(t *testing.T) {
	defer func(n, c, p, q int) {
		parallelMinChains, sweepChunkSize, parallelMinPolygons, parallelMinPoints = n, c, p, q
	}(parallelMinChains, sweepChunkSize, parallelMinPolygons, parallelMinPoints)
	parallelMinChains, sweepChunkSize, parallelMinPolygons, parallelMinPoints = 2, 3, 2, 1
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

// TestParallelRingsFaultAgrees plants the faults GEOS finds before it
// looks for intersections (a non-finite coordinate, a ring not closed, a
// ring of too few points) in random polygons of MultiPolygons, checks
// their rings on several goroutines (the threshold lowered to nothing) and
// holds the answer to the sequential one: the first polygon's fault, in
// GEOS's order within it.
func TestParallelRingsFaultAgrees(t *testing.T) {
	defer func(n int) { parallelMinPoints = n }(parallelMinPoints)
	parallelMinPoints = 1
	rng := rand.New(rand.NewPCG(13, 14))
	plant := []func(r orb.Ring) orb.Ring{
		func(r orb.Ring) orb.Ring { r[rng.IntN(len(r))][0] = math.NaN(); return r },
		func(r orb.Ring) orb.Ring { r[rng.IntN(len(r))][1] = math.Inf(1); return r },
		func(r orb.Ring) orb.Ring { return r[:len(r)-1] },
		func(r orb.Ring) orb.Ring { return orb.Ring{r[0], r[1], r[1], r[0]} },
	}
	var seq, par Validator
	kinds := map[string]int{}
	for round := range 4000 {
		mp := make(orb.MultiPolygon, 2+rng.IntN(30))
		for i := range mp {
			for range 1 + rng.IntN(3) {
				k := 4 + rng.IntN(5)
				r := make(orb.Ring, k)
				for j := range k - 1 {
					r[j] = orb.Point{float64(rng.IntN(100)), float64(rng.IntN(100))}
				}
				r[k-1] = r[0]
				mp[i] = append(mp[i], r)
			}
		}
		for range rng.IntN(4) {
			p := mp[rng.IntN(len(mp))]
			if r := rng.IntN(len(p)); len(p[r]) >= 4 {
				p[r] = plant[rng.IntN(len(plant))](p[r])
			}
		}
		want, werr := seq.Check(mp, nil)
		got, gerr := par.Check(mp, &Options{Workers: 1 + rng.IntN(8)})
		require.Equal(t, reason(want, werr), reason(got, gerr), "round %d", round)
		kinds[want.message()]++
	}
	for _, code := range []int{codeInvalidCoordinate, codeRingNotClosed, codeTooFewPoints} {
		require.Greater(t, kinds[messages[code]], 100, "too few of %q: %v", messages[code], kinds)
	}
}
