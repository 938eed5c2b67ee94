//go:build cgo

package spatial_test

import (
	"errors"
	"runtime/debug"
	"testing"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/corpus/nesting"
	"github.com/geodlq/geodlq/spatial"
)

// requireWellClassified fails unless err is nil or a *classify.Error with a
// valid class and stage.
func requireWellClassified(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ce *classify.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is %T, not a *classify.Error", err, err)
	}
	if !ce.Class.Valid() || !ce.Stage.Valid() {
		t.Fatalf("error %v has class %v, stage %v", err, ce.Class, ce.Stage)
	}
	if ce.Geometry == nil || ce.Geometry.Kind == "" || ce.Geometry.Reason == "" {
		t.Fatalf("error %v has no geometry detail: %+v", err, ce.Geometry)
	}
}

func FuzzCheckGeometry(f *testing.F) {
	for _, s := range corpus.GeometrySeeds {
		f.Add([]byte(s))
	}
	c := newChecker(f, &spatial.Options{MaxVertices: 10_000, MaxBytes: 1 << 20})
	// With the stack capped, per-level recursion in any reader or walker
	// would overflow within the 1 MiB inputs the fuzzer may grow.
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	f.Fuzz(func(t *testing.T, data []byte) {
		requireWellClassified(t, c.CheckGeometry(data))
		out, _, err := c.MakeValid(data)
		requireWellClassified(t, err)
		if err == nil {
			// What MakeValid returns must pass.
			requireNoErr(t, c.CheckGeometry(out))
		}
		_, err = c.Reproject(data, 4326, 3857)
		requireWellClassified(t, err)
	})
}

func requireNoErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v (detail %+v)", err, classify.DetailOf(err))
	}
}

func FuzzCheckEvent(f *testing.F) {
	for _, it := range corpus.All() {
		f.Add(it.Payload)
	}
	for _, s := range corpus.GeometrySeeds {
		f.Add([]byte(`{"event_id":"x","crs":"EPSG:4326","geometry":` + s + `}`))
	}
	f.Add([]byte(`{"crs":{"type":"link","properties":{"href":"x"}},"geometry":{"type":"Point","coordinates":[1,2]}}`))
	f.Add([]byte(`{"crs":3857,"geometry":{"type":"Point","coordinates":[1,2]},"properties":{"a":[{"b":"\ud83d\ude00"}]}}`))
	for _, seed := range corpus.HostileSeeds(corpus.InputEvent) {
		f.Add(seed)
	}
	c := newChecker(f, &spatial.Options{MaxVertices: 10_000, MaxBytes: 1 << 20, CRSCacheSize: 64})
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := c.CheckEvent(data)
		requireWellClassified(t, err)
	})
}

// maxFuzzDepth bounds the depth FuzzCheckEventNesting builds: with the
// stack capped at 1 MiB, per-level recursion overflows within a few
// thousand levels.
const maxFuzzDepth = 200_000

// FuzzCheckEventNesting is a structured fuzzer for depth, which a byte
// mutator working under a 1 MiB input cap cannot reach: it chooses the
// position (nesting.Build's shapes), the depth (up to 200,000 levels, a
// few megabytes, under the default byte budget) and what fills each level,
// and CheckEvent — with default options — must answer with a classified
// error or a verdict, never Go's fatal stack overflow. A ~30 MB event of
// nested GeometryCollections used to die so.
func FuzzCheckEventNesting(f *testing.F) {
	for s := range nesting.Shapes() {
		for _, d := range []uint32{0, 1, 8, 9, 512, 513, 10_000, maxFuzzDepth} {
			f.Add(uint8(s), d, []byte(nil))
		}
		f.Add(uint8(s), uint32(2000), []byte(`"type":"Point",`))
	}
	c := newChecker(f, nil)
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	f.Fuzz(func(t *testing.T, shape uint8, depth uint32, filler []byte) {
		if len(filler) > 32 {
			filler = filler[:32]
		}
		_, err := c.CheckEvent(nesting.Build(int(shape), int(depth%(maxFuzzDepth+1)), filler))
		requireWellClassified(t, err)
	})
}
