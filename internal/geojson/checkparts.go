package geojson

import (
	"sync"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
)

// parallelCheckMin is the fewest positions of a MultiPolygon that
// [CheckGeometry] checks on several goroutines (a variable so that tests
// can check small geometries in parallel).
var parallelCheckMin = 1 << 16

// CheckGeometry is [CheckRange] (when geographic) and then [Validate]: it
// returns the first error of either, as they return it. A MultiPolygon of
// at least 65,536 positions is checked on up to workers goroutines, each
// taking a run of consecutive polygons; every fault is then found where it
// lies, and the one returned is the one the sequential checks return (a
// range fault before any other, then a non-finite coordinate, then a ring
// fault; within each, the first in document order), whatever the number
// of workers.
func CheckGeometry(g Geometry, geographic bool, workers int) *classify.Error {
	mp, ok := g.Geom.(orb.MultiPolygon)
	if !ok || workers < 2 || len(mp) < 2 || g.Vertices < parallelCheckMin {
		if geographic {
			if err := CheckRange(g); err != nil {
				return err
			}
		}
		return Validate(g)
	}
	runs := polygonRuns(mp, min(workers, len(mp)))
	// found[k] holds run k's first fault of each kind: out of range,
	// non-finite, a ring's.
	found := make([][3]*classify.Error, len(runs)-1)
	var wg sync.WaitGroup
	for k := range found {
		wg.Go(func() {
			sub := Geometry{Geom: mp[runs[k]:runs[k+1]], Vertices: g.Vertices}
			if geographic {
				found[k][0] = CheckRange(sub)
			}
			if found[k][1] = CheckFinite(sub); found[k][1] == nil {
				found[k][2] = checkComponents(sub)
			}
		})
	}
	wg.Wait()
	for kind := range 3 {
		for k := range found {
			if err := found[k][kind]; err != nil {
				// The run's polygons are numbered from its first.
				if f := err.Geometry.Fault; f != nil {
					f.Part += runs[k]
				}
				return err
			}
		}
	}
	return nil
}

// polygonRuns cuts mp into at most n runs of consecutive polygons of about
// as many positions each, and returns their bounds: run k is
// mp[runs[k]:runs[k+1]].
func polygonRuns(mp orb.MultiPolygon, n int) []int {
	sizes := make([]int, len(mp))
	total := 0
	for i, p := range mp {
		for _, r := range p {
			sizes[i] += len(r)
		}
		total += sizes[i]
	}
	runs := make([]int, 1, n+1)
	sum := 0
	for i, s := range sizes {
		sum += s
		// Cut after polygon i once the runs so far hold their share.
		if len(runs) < n && i+1 < len(mp) && sum*n >= total*len(runs) {
			runs = append(runs, i+1)
		}
	}
	return append(runs, len(mp))
}
