package geojson

import (
	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
)

// ComponentKind says what a [Component]'s positions form.
type ComponentKind uint8

// The component kinds.
const (
	// KindPoints: a Point or a MultiPoint's positions; no segments.
	KindPoints ComponentKind = iota + 1
	// KindLine: a LineString; consecutive positions form segments.
	KindLine
	// KindRing: a polygon ring; consecutive positions form segments and the
	// ring should end where it starts.
	KindRing
)

// Component is one run of positions in a geometry: a ring, a line, or the
// points of a Point or MultiPoint.
//
// Part and Ring follow [classify.Fault]: Part is the index of the member of
// a Multi* geometry or GeometryCollection (-1 for a single geometry); Ring
// is the ring's index within its polygon (0 = exterior, -1 for lines and
// points). Inside a GeometryCollection, Part is the collection member's
// index, and a member that has several rings or lines (a Polygon,
// MultiPolygon, MultiLineString or nested collection) numbers all of them
// consecutively in Ring, in document order; a member that is a single
// LineString, Point or MultiPoint has Ring -1.
type Component struct {
	// Kind says whether the positions form points, a line or a ring.
	Kind ComponentKind
	// Part is the member index, or -1.
	Part int
	// Ring is the ring (or, in a collection member, ring or line) index,
	// or -1.
	Ring int
	// Points are the positions, aliasing the geometry's.
	Points []orb.Point
	// First is the document-order index (as in [Geometry.Z]) of Points[0].
	First int
}

// Fault returns the fault path of the component's i-th position.
func (c Component) Fault(i int) *classify.Fault {
	return &classify.Fault{Part: c.Part, Ring: c.Ring, Vertex: i}
}

// Components calls fn for every component of g in document order and stops
// early when fn returns false. It reports whether it visited them all.
// Points passed to fn alias g's coordinates.
func Components(g orb.Geometry, fn func(Component) bool) bool {
	w := walker{fn: fn}
	return w.top(g)
}

type walker struct {
	fn  func(Component) bool
	doc int
}

func (w *walker) emit(kind ComponentKind, part, ring int, pts []orb.Point) bool {
	c := Component{Kind: kind, Part: part, Ring: ring, Points: pts, First: w.doc}
	w.doc += len(pts)
	return w.fn(c)
}

func (w *walker) top(g orb.Geometry) bool {
	switch g := g.(type) {
	case orb.Point:
		return w.emit(KindPoints, -1, -1, []orb.Point{g})
	case orb.MultiPoint:
		return w.emit(KindPoints, -1, -1, g)
	case orb.LineString:
		return w.emit(KindLine, -1, -1, g)
	case orb.Ring:
		return w.emit(KindRing, -1, 0, g)
	case orb.MultiLineString:
		for i, l := range g {
			if !w.emit(KindLine, i, -1, l) {
				return false
			}
		}
	case orb.Polygon:
		for r, ring := range g {
			if !w.emit(KindRing, -1, r, ring) {
				return false
			}
		}
	case orb.MultiPolygon:
		for i, poly := range g {
			for r, ring := range poly {
				if !w.emit(KindRing, i, r, ring) {
					return false
				}
			}
		}
	case orb.Collection:
		for i, m := range g {
			k := 0
			if !w.member(i, m, &k) {
				return false
			}
		}
	}
	return true
}

// member walks a collection member; k numbers its rings and lines
// consecutively. Inside nested collections every component takes a
// number. Nested collections are walked with an explicit stack, not by
// recursion, so no geometry, however deep, can exhaust the goroutine's
// stack.
func (w *walker) member(part int, g orb.Geometry, k *int) bool {
	type frame struct {
		c orb.Collection
		i int
	}
	var stack []frame
	flat := false
	for {
		if c, ok := g.(orb.Collection); ok {
			stack = append(stack, frame{c: c})
		} else if !w.leaf(part, g, k, flat) {
			return false
		}
		// The next member of the innermost unfinished collection.
		for {
			if len(stack) == 0 {
				return true
			}
			top := &stack[len(stack)-1]
			if top.i < len(top.c) {
				g, flat = top.c[top.i], true
				top.i++
				break
			}
			stack = stack[:len(stack)-1]
		}
	}
}

// leaf walks a collection member that is not itself a collection.
func (w *walker) leaf(part int, g orb.Geometry, k *int, flat bool) bool {
	next := func() int {
		if !flat {
			return -1
		}
		*k++
		return *k - 1
	}
	switch g := g.(type) {
	case orb.Point:
		return w.emit(KindPoints, part, next(), []orb.Point{g})
	case orb.MultiPoint:
		return w.emit(KindPoints, part, next(), g)
	case orb.LineString:
		return w.emit(KindLine, part, next(), g)
	case orb.Ring:
		*k++
		return w.emit(KindRing, part, *k-1, g)
	case orb.MultiLineString:
		for _, l := range g {
			*k++
			if !w.emit(KindLine, part, *k-1, l) {
				return false
			}
		}
	case orb.Polygon:
		for _, ring := range g {
			*k++
			if !w.emit(KindRing, part, *k-1, ring) {
				return false
			}
		}
	case orb.MultiPolygon:
		for _, poly := range g {
			for _, ring := range poly {
				*k++
				if !w.emit(KindRing, part, *k-1, ring) {
					return false
				}
			}
		}
	}
	return true
}

// Walk calls fn for every position of g in document order with its index
// in that order and its fault path, and stops early when fn returns false.
// It reports whether it visited them all.
func Walk(g orb.Geometry, fn func(doc int, at classify.Fault, p orb.Point) bool) bool {
	return Components(g, func(c Component) bool {
		for i, p := range c.Points {
			if !fn(c.First+i, classify.Fault{Part: c.Part, Ring: c.Ring, Vertex: i}, p) {
				return false
			}
		}
		return true
	})
}

// Refresh returns g.Geom with every orb.Point value re-read from g.Points.
// Rings, lines and multi-geometries alias Points, so modifying Points in
// place modifies them; a Point (alone or in a collection) is an orb value
// holding a copy, and needs this.
func Refresh(g Geometry) orb.Geometry {
	i := 0
	return refresh(g.Geom, g.Points, &i)
}

// refresh recurses on collections: g comes from a parse, so they are
// nested at most CeilingMaxNesting deep.
func refresh(geom orb.Geometry, pts []orb.Point, i *int) orb.Geometry {
	switch g := geom.(type) {
	case orb.Point:
		if *i < len(pts) {
			g = pts[*i]
		}
		*i++
		return g
	case orb.Collection:
		for j, m := range g {
			g[j] = refresh(m, pts, i)
		}
		return g
	}
	Components(geom, func(c Component) bool {
		*i += len(c.Points)
		return true
	})
	return geom
}
