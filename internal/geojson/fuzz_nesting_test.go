package geojson

import (
	"runtime/debug"
	"testing"

	"github.com/geodlq/geodlq/internal/corpus/nesting"
)

// maxFuzzDepth bounds the depth FuzzNesting builds: with the stack capped
// at 1 MiB, a reader that recursed once per level would overflow within a
// few thousand levels, so two hundred thousand (a few megabytes of input)
// are plenty and keep each run fast.
const maxFuzzDepth = 200_000

// FuzzNesting reaches depths a byte-level mutator never would: the fuzzer
// chooses a position (nesting.Build's shapes: collections, coordinates
// before and after their type, properties, bbox, crs objects, ...), a
// depth and what fills every level, and ParseEvent and ParseGeometry must
// answer with an *Error or a geometry the walkers and writer handle —
// never Go's fatal stack overflow, which the 1 MiB stack cap makes any
// per-level recursion hit.
func FuzzNesting(f *testing.F) {
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	for s := range nesting.Shapes() {
		for _, d := range []uint32{0, 1, DefaultMaxNesting, DefaultMaxNesting + 1, DefaultMaxDepth, DefaultMaxDepth + 1, 10_000, maxFuzzDepth} {
			f.Add(uint8(s), d, []byte(nil))
		}
		f.Add(uint8(s), uint32(1000), []byte(" \n"))
		f.Add(uint8(s), uint32(1000), []byte(`"x":1,`))
		f.Add(uint8(s), uint32(1000), []byte("\x00"))
	}
	f.Fuzz(func(t *testing.T, shape uint8, depth uint32, filler []byte) {
		if len(filler) > 32 {
			filler = filler[:32]
		}
		doc := nesting.Build(int(shape), int(depth%(maxFuzzDepth+1)), filler)
		ev, err := ParseEvent(doc, Limits{})
		if err != nil {
			var ge *Error
			if !errorsAs(err, &ge) || ge.Kind == "" || ge.Offset < 0 || ge.Offset > len(doc) {
				t.Fatalf("bad error %v", err)
			}
		} else {
			n := 0
			Components(ev.Geometry.Geom, func(Component) bool { n++; return true })
			_, _ = Append(nil, ev.Geometry.Geom, ev.Geometry.Z)
			_ = Validate(ev.Geometry)
		}
		if _, err := ParseGeometry(doc, Limits{}); err != nil {
			var ge *Error
			if !errorsAs(err, &ge) || ge.Kind == "" {
				t.Fatalf("bad error %v", err)
			}
		}
	})
}
