package geojson

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
)

// sequentialCheck is what CheckGeometry must return: CheckRange (when
// geographic), then Validate.
func sequentialCheck(g Geometry, geographic bool) *classify.Error {
	if geographic {
		if err := CheckRange(g); err != nil {
			return err
		}
	}
	return Validate(g)
}

// TestCheckGeometryParallel holds CheckGeometry on several goroutines (the
// threshold lowered to nothing) to the sequential checks on MultiPolygons
// with faults of every kind the checks report planted in random polygons,
// alone and together, in every combination of kinds.
func TestCheckGeometryParallel(t *testing.T) {
	defer func(n int) { parallelCheckMin = n }(parallelCheckMin)
	parallelCheckMin = 1
	rng := rand.New(rand.NewPCG(3, 4))
	// The faults, each planted at a random ring and position.
	plant := []func(r orb.Ring, i int) orb.Ring{
		func(r orb.Ring, i int) orb.Ring { r[i][0] = 200; return r },               // out of range
		func(r orb.Ring, i int) orb.Ring { r[i][1] = math.NaN(); return r },        // non-finite
		func(r orb.Ring, i int) orb.Ring { r[i][0] = math.Inf(-1); return r },      // non-finite
		func(r orb.Ring, _ int) orb.Ring { return r[:len(r)-1] },                   // not closed
		func(r orb.Ring, _ int) orb.Ring { return orb.Ring{r[0], r[1], r[0]} },     // too few
		func(r orb.Ring, _ int) orb.Ring { return orb.Ring{} },                     // empty ring
		func(r orb.Ring, i int) orb.Ring { r[i][0], r[i][1] = -180, 90; return r }, // in range, still valid
	}
	kinds := map[string]int{}
	for round := range 3000 {
		n := 2 + rng.IntN(40)
		mp := make(orb.MultiPolygon, n)
		vertices := 0
		for i := range mp {
			if rng.IntN(20) == 0 {
				mp[i] = orb.Polygon{} // an empty polygon
				continue
			}
			for range 1 + rng.IntN(3) {
				k := 4 + rng.IntN(6)
				r := make(orb.Ring, k)
				for j := range k - 1 {
					r[j] = orb.Point{rng.Float64()*360 - 180, rng.Float64()*180 - 90}
				}
				r[k-1] = r[0]
				mp[i] = append(mp[i], r)
			}
		}
		for range rng.IntN(4) {
			i := rng.IntN(n)
			if len(mp[i]) == 0 {
				continue
			}
			r := rng.IntN(len(mp[i]))
			if len(mp[i][r]) < 4 { // a fault planted already
				continue
			}
			mp[i][r] = plant[rng.IntN(len(plant))](mp[i][r], rng.IntN(len(mp[i][r])))
		}
		for _, p := range mp {
			for _, r := range p {
				vertices += len(r)
			}
		}
		g := Geometry{Geom: mp, Vertices: vertices}
		for _, geographic := range []bool{false, true} {
			want := sequentialCheck(g, geographic)
			for _, workers := range []int{1, 2, 3, 7, 64} {
				got := CheckGeometry(g, geographic, workers)
				name := fmt.Sprintf("round %d, geographic %v, %d workers", round, geographic, workers)
				if want == nil {
					require.Nil(t, got, name)
					continue
				}
				require.NotNil(t, got, name)
				require.Equal(t, want.Class, got.Class, name)
				require.Equal(t, want.Stage, got.Stage, name)
				require.Equal(t, want.Error(), got.Error(), name)
				require.Equal(t, want.Geometry, got.Geometry, name)
			}
			if want == nil {
				kinds["valid"]++
			} else {
				kinds[string(want.Geometry.Kind)]++
			}
		}
	}
	for _, k := range []string{"valid", string(classify.KindOutOfRange), string(classify.KindInvalidCoordinate),
		string(classify.KindRingNotClosed), string(classify.KindTooFewPoints)} {
		require.Greater(t, kinds[k], 50, "too few geometries of kind %s: %v", k, kinds)
	}
}

// TestPolygonRuns checks the runs cover every polygon once, in order, and
// share the positions out.
func TestPolygonRuns(t *testing.T) {
	ring := func(n int) orb.Ring { return make(orb.Ring, n) }
	tests := []struct {
		sizes []int
		n     int
		want  []int
	}{
		{sizes: []int{4, 4, 4, 4}, n: 2, want: []int{0, 2, 4}},
		{sizes: []int{4, 4, 4, 4}, n: 4, want: []int{0, 1, 2, 3, 4}},
		{sizes: []int{100, 4, 4, 4}, n: 2, want: []int{0, 1, 4}},
		{sizes: []int{4, 4, 4, 100}, n: 2, want: []int{0, 4}}, // the last polygon is half
		{sizes: []int{4, 4}, n: 8, want: []int{0, 1, 2}},
		{sizes: []int{0, 0, 8}, n: 2, want: []int{0, 3}},
	}
	for _, tt := range tests {
		mp := make(orb.MultiPolygon, len(tt.sizes))
		for i, s := range tt.sizes {
			if s > 0 {
				mp[i] = orb.Polygon{ring(s)}
			}
		}
		require.Equal(t, tt.want, polygonRuns(mp, tt.n), "sizes %v into %d", tt.sizes, tt.n)
	}
}
