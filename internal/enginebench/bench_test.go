package enginebench_test

import (
	"cmp"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geodlq/geodlq/internal/benchcorpus"
	"github.com/geodlq/geodlq/internal/enginebench"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/geos"
)

// BenchmarkEngines is issue 22's library comparison over the benchmark
// corpus (internal/benchcorpus; one op = every event once, bytes to
// verdict), all in one process so that the machine's load falls on every
// side alike:
//
//   - geodlq-go-1core: spatial.Checker.CheckEvent with the pure-Go engine
//     (the default), GOMAXPROCS=1;
//   - geodlq-geos-1core: the same with Options.Engine = EngineGEOS;
//   - go-geos-1core: go-geos, GEOS's GeoJSON reader and IsValidReason;
//   - simplefeatures-1core: simplefeatures' GeoJSON reader and Validate;
//   - geodlq-go-allcores and geodlq-go-allcores-largest-first: CheckEvent
//     on one goroutine per CPU taking the next event, in file order (the
//     40 MB event last) and largest first.
//
// The libraries check less than CheckEvent does (no CRS, no coordinate
// range), and simplefeatures' verdicts are its own, not GEOS's.
func BenchmarkEngines(b *testing.B) {
	events := benchcorpus.Load(b, benchcorpus.Ensure(b))
	var size int64
	for _, e := range events {
		size += int64(len(e))
	}
	engine, err := geos.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = engine.Close() })
	checker := func(e spatial.Engine) *spatial.Checker {
		c, err := spatial.NewChecker(&spatial.Options{Engine: e, GEOS: engine})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	goC, geosC := checker(spatial.EngineGo), checker(spatial.EngineGEOS)
	g := enginebench.NewGEOS()
	oneCore := func(check func([]byte)) func(b *testing.B) {
		return func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			b.SetBytes(size)
			start := time.Now()
			for b.Loop() {
				for _, e := range events {
					check(e)
				}
			}
			b.ReportMetric(float64(len(events))*float64(b.N)/time.Since(start).Seconds(), "events/s")
		}
	}
	b.Run("geodlq-go-1core", oneCore(func(e []byte) { _, _ = goC.CheckEvent(e) }))
	b.Run("geodlq-geos-1core", oneCore(func(e []byte) { _, _ = geosC.CheckEvent(e) }))
	b.Run("go-geos-1core", oneCore(func(e []byte) { _, _ = g.Check(e) }))
	b.Run("simplefeatures-1core", oneCore(func(e []byte) { _ = enginebench.SimpleFeatures(e) }))
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
							_, _ = goC.CheckEvent(events[i])
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(len(events))*float64(b.N)/time.Since(start).Seconds(), "events/s")
		}
	}
	b.Run("geodlq-go-allcores", allCores(events))
	b.Run("geodlq-go-allcores-largest-first", allCores(slices.SortedStableFunc(slices.Values(events), func(x, y []byte) int {
		return cmp.Compare(len(y), len(x))
	})))
}
