package validity

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/paulmach/orb"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(1 /*RUSAGE_THREAD*/, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestZZProf(t *testing.T) {
	runtime.LockOSThread()
	data, _ := os.ReadFile("/tmp/land.json")
	ev, err := geojson.ParseEvent(data, geojson.Limits{MaxVertices: -1, MaxParts: -1, MaxHoles: -1})
	if err != nil {
		t.Fatal(err)
	}
	mp := ev.Geometry.Geom.(orb.MultiPolygon)
	holes := 0
	for _, p := range mp {
		holes += len(p) - 1
	}
	t.Logf("polygons %d holes %d vertices %d", len(mp), holes, ev.Geometry.Vertices)
	v := new(Validator)
	for round := 0; round < 3; round++ {
		a := &v.a
		t0 := cpuNow()
		a.reset()
		for _, p := range mp {
			a.addPolygon(p)
		}
		for i := range a.ss {
			a.addChains(int32(i))
		}
		t1 := cpuNow()
		clean := a.sweep()
		t2 := cpuNow()
		tr := &a.tree
		tr.reset()
		for i := range a.chains {
			tr.insert(a.chains[i].env, int32(i))
		}
		tr.build()
		a.intersectChainsBuilt()
		t3 := cpuNow()
		t.Logf("clean %v", clean)
		for _, p := range mp {
			v.holesInShell(p)
		}
		for _, p := range mp {
			v.holesNotNested(p)
		}
		t4 := cpuNow()
		v.shellsNotNested(mp)
		t5 := cpuNow()
		a.holeCycle()
		t6 := cpuNow()
		t.Logf("chains %d (%v) tree %v intersect %v holes %v shells %v cycle %v total %v", len(a.chains), t1-t0, t2-t1, t3-t2, t4-t3, t5-t4, t6-t5, t6-t0)
	}
}

func BenchmarkZZSweep(b *testing.B) {
	data, _ := os.ReadFile("/tmp/land.json")
	ev, _ := geojson.ParseEvent(data, geojson.Limits{MaxVertices: -1, MaxParts: -1, MaxHoles: -1})
	mp := ev.Geometry.Geom.(orb.MultiPolygon)
	v := new(Validator)
	a := &v.a
	a.reset()
	for _, p := range mp {
		a.addPolygon(p)
	}
	for i := range a.ss {
		a.addChains(int32(i))
	}
	runtime.LockOSThread()
	t0 := cpuNow()
	for b.Loop() {
		a.restart()
		a.sweep()
	}
	b.ReportMetric(float64(cpuNow()-t0)/float64(b.N), "cpu-ns/op")
}
