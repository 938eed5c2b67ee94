package validity

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/paulmach/orb"
)

// TestIndexedLocationMatchesScan holds the y-range index to the plain ray
// crossing scan it replaces for rings asked about often: the same location
// for every point, and the same first segment through a boundary point,
// on rings with horizontal runs, repeated y values, spikes and huge
// coordinate ranges.
func TestIndexedLocationMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for trial := range 300 {
		n := 64 + rng.IntN(400)
		scale := []float64{1, 1e-300, 1e300, 1e15}[trial%4]
		grid := 2 + rng.IntN(30)
		ring := make([]orb.Point, n, n+1)
		for i := range ring {
			ring[i] = orb.Point{float64(rng.IntN(grid)) * scale, float64(rng.IntN(grid)) * scale}
			if trial%5 == 0 {
				ring[i][1] = math.Copysign(math.MaxFloat64, float64(rng.IntN(3)-1)) * float64(rng.IntN(2))
			}
		}
		ring = append(ring, ring[0])
		plain := ringLoc{pts: ring, queries: math.MinInt}
		indexed := ringLoc{pts: ring, idx: newYIndex(ring)}
		for range 200 {
			var p orb.Point
			switch rng.IntN(3) {
			case 0: // a vertex
				p = ring[rng.IntN(n)]
			case 1: // a grid point
				p = orb.Point{float64(rng.IntN(grid)) * scale, float64(rng.IntN(grid)) * scale}
			default: // the middle of a segment
				i := rng.IntN(n)
				p = orb.Point{ring[i][0]/2 + ring[i+1][0]/2, ring[i][1]/2 + ring[i+1][1]/2}
			}
			if got, want := indexed.locate(p), plain.locate(p); got != want {
				t.Fatalf("trial %d: %v located %d with the index, %d by the scan", trial, p, got, want)
			}
			if got, want := indexed.intersectingSegIndex(p), plain.intersectingSegIndex(p); got != want {
				t.Fatalf("trial %d: %v on segment %d with the index, %d by the scan", trial, p, got, want)
			}
		}
	}
}
