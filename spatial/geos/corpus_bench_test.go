//go:build cgo

package geos

import (
	"cmp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/internal/benchcorpus"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/internal/validity"
	"github.com/geodlq/geodlq/spatial"
)

// loadCorpus loads the benchmark corpus (internal/benchcorpus).
func loadCorpus(b *testing.B) (path string, events [][]byte, size int64) {
	b.Helper()
	path = benchcorpus.Ensure(b)
	events = benchcorpus.Load(b, path)
	for _, e := range events {
		size += int64(len(e))
	}
	return path, events, size
}

// BenchmarkCorpus is issue 13's comparison, from event bytes to verdict,
// over the Natural Earth corpus of internal/benchcorpus (one op = every
// event once), all in one run so that the machine's load falls on every
// side alike (with -count, the sub-benchmarks take turns):
//
//   - python: scripts/shapely-baseline.py, json.loads + shape() +
//     is_valid + explain_validity when invalid, timed by the script over
//     events already in memory (Debian's python3-shapely, same GEOS);
//   - checkevent-1core: CheckEvent (the default, pure-Go engine) on each
//     event in turn, GOMAXPROCS=1;
//   - checkevent-geos-1core: the same with Options.Engine = EngineGEOS,
//     the check path before the pure-Go engine (issue 22's baseline);
//   - checkevent-allcores: CheckEvent on every core (one goroutine per
//     CPU taking the next event), GOMAXPROCS=NumCPU;
//   - checkevent-allcores-largest-first: the same with the events sorted
//     largest first, so that the large one does not run alone at the end;
//   - largest-1core and largest-allcores: CheckEvent on the largest event
//     alone (the 40 MB land MultiPolygon), GOMAXPROCS=1 and NumCPU;
//   - geos-isvalid: the floor: GEOSisValid_r alone, on one core, on the
//     geometries CheckEvent hands to GEOS, built beforehand (events that
//     fail before GEOS — NaN, unclosed rings, a wrong CRS — cost the floor
//     nothing);
//   - engine-isvalid: the pure-Go engine alone, one core, on the same
//     geometries, parsed beforehand.
func BenchmarkCorpus(b *testing.B) {
	path, events, size := loadCorpus(b)
	c := newChecker(b, nil)

	b.Run("python", func(b *testing.B) {
		b.SetBytes(size)
		elapsed, _ := benchcorpus.PythonPasses(b, path, b.N)
		b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/op")
		b.ReportMetric(float64(len(events))*float64(b.N)/elapsed.Seconds(), "events/s")
	})
	oneCore := func(c *spatial.Checker) func(b *testing.B) {
		return func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			b.SetBytes(size)
			start, cpu := time.Now(), processCPU()
			for b.Loop() {
				for _, e := range events {
					_, _ = c.CheckEvent(e)
				}
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(len(events))*float64(b.N)/time.Since(start).Seconds(), "events/s")
		}
	}
	b.Run("checkevent-1core", oneCore(c))
	b.Run("checkevent-geos-1core", oneCore(newChecker(b, &spatial.Options{Engine: spatial.EngineGEOS})))
	allCores := func(events [][]byte) func(b *testing.B) {
		return func(b *testing.B) {
			n := runtime.NumCPU()
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
			b.SetBytes(size)
			start := time.Now()
			for b.Loop() {
				var next atomic.Int64
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() {
						for {
							i := int(next.Add(1)) - 1
							if i >= len(events) {
								return
							}
							_, _ = c.CheckEvent(events[i])
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(len(events))*float64(b.N)/time.Since(start).Seconds(), "events/s")
		}
	}
	b.Run("checkevent-allcores", allCores(events))
	// The same events largest first: how far the Checker scales when one
	// large event does not run alone at the end (the corpus's 40 MB event
	// is its last line and about 40% of the work).
	b.Run("checkevent-allcores-largest-first", allCores(slices.SortedStableFunc(slices.Values(events), func(x, y []byte) int {
		return cmp.Compare(len(y), len(x))
	})))
	// The largest event (the 40 MB land MultiPolygon, 3,933 polygons)
	// alone, on one core and on every core: how far one large event's
	// check (its parse, its coordinate and ring checks, its chains, its
	// sweep and its nested-shell tests, each split over the polygons)
	// scales; the corpus in file order ends with it running alone.
	largest := slices.MaxFunc(events, func(x, y []byte) int { return cmp.Compare(len(x), len(y)) })
	for _, procs := range []int{1, runtime.NumCPU()} {
		name := "largest-1core"
		if procs > 1 {
			name = "largest-allcores"
		}
		b.Run(name, func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			b.SetBytes(int64(len(largest)))
			start, cpu := time.Now(), processCPU()
			for b.Loop() {
				if _, err := c.CheckEvent(largest); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
	b.Run("geos-isvalid", func(b *testing.B) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		floor := newFloor(b, c, events)
		defer floor.close()
		b.SetBytes(size)
		start, cpu := time.Now(), processCPU()
		for b.Loop() {
			floor.run()
		}
		reportCPU(b, cpu)
		b.ReportMetric(float64(len(events))*float64(b.N)/time.Since(start).Seconds(), "events/s")
	})
	b.Run("engine-isvalid", func(b *testing.B) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		var geoms []orb.Geometry
		for _, e := range events {
			if g, ok := geosInput(c, e); ok {
				geoms = append(geoms, g.Geom)
			}
		}
		b.SetBytes(size)
		start, cpu := time.Now(), processCPU()
		for b.Loop() {
			for _, g := range geoms {
				_, _ = validity.Check(g, nil)
			}
		}
		reportCPU(b, cpu)
		b.ReportMetric(float64(len(events))*float64(b.N)/time.Since(start).Seconds(), "events/s")
	})
}

// geometries returns the geometry CheckEvent hands to GEOS for payload,
// or false when it fails before: the steps of checkEvent before topology.
func geosInput(c *spatial.Checker, payload []byte) (geojson.Geometry, bool) {
	o := c.Options()
	ev, err := geojson.ParseEvent(payload, geojson.Limits{MaxVertices: o.MaxVertices, MaxParts: o.MaxParts, MaxHoles: o.MaxHoles})
	if err != nil || ev.CRS.Form == geojson.CRSLinked {
		return geojson.Geometry{}, false
	}
	crs := ev.CRS.Name
	if strings.TrimSpace(crs) == "" {
		crs = "OGC:CRS84" // RFC 7946's default
	}
	if c.CheckCRS(crs, o.ExpectedEPSG) != nil {
		return geojson.Geometry{}, false
	}
	info, err := c.ResolveCRS(crs)
	if err != nil {
		return geojson.Geometry{}, false
	}
	g := ev.Geometry
	if info.Geographic && geojson.CheckRange(g) != nil {
		return geojson.Geometry{}, false
	}
	if geojson.Validate(g) != nil {
		return geojson.Geometry{}, false
	}
	return g, true
}

// floor holds the geometries of the GEOS floor, built beforehand.
type floor struct {
	geoms []*geosPrebuilt
}

func newFloor(b testing.TB, c *spatial.Checker, events [][]byte) *floor {
	f := &floor{}
	var p geosProgram
	for _, e := range events {
		g, ok := geosInput(c, e)
		if !ok {
			continue
		}
		p.set(g.Geom, g.Points)
		geom, err := prebuild(&p)
		if err != nil {
			b.Fatal(err)
		}
		f.geoms = append(f.geoms, geom)
	}
	return f
}

func (f *floor) run() {
	for _, g := range f.geoms {
		_ = g.isValid()
	}
}

func (f *floor) close() {
	for _, g := range f.geoms {
		g.destroy()
	}
}

// processCPU is the process's user and system CPU time so far. On a
// shared machine a one-core benchmark's elapsed time includes waiting for
// the CPU; its CPU time (every thread's: the garbage collector's, GEOS's)
// does not, and is what the one-core sub-benchmarks also report, as
// cpu-ns/op.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, since time.Duration) {
	b.ReportMetric(float64(processCPU()-since)/float64(b.N), "cpu-ns/op")
}
