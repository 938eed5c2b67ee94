// Package validitytest generates geometries for differential tests of
// geodlq's validity engines: small polygons on a coarse grid (so that
// vertices coincide, edges overlap and rings touch), holes, multipolygons,
// collections, repeated points, near-collinear points a few ulps off a
// line, and coordinates from the tiniest to the largest doubles. A byte
// string drives every choice, so that a fuzzer mutates geometries by
// mutating bytes, and every byte string gives a geometry.
package validitytest

import (
	"math"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/internal/geojson"
)

// reader hands out the bytes of a program; past its end it reads zeros.
type reader struct {
	b []byte
	i int
}

func (r *reader) byte() byte {
	if r.i >= len(r.b) {
		return 0
	}
	c := r.b[r.i]
	r.i++
	return c
}

func (r *reader) n(k int) int { return int(r.byte()) % k }

// Bounds on what one program builds.
const (
	maxParts  = 6
	maxRings  = 5
	maxPoints = 14
	maxDepth  = 3
)

// scales are the coordinate magnitudes a program picks from.
var scales = []float64{1, 1, 1, 0.1, 1e-9, 1e9, 1e-300, 1e300, 1e15, 3e-320, 1e-5, 123456.789, 1.7e308 / 16}

// gen builds one geometry.
type gen struct {
	r      reader
	scale  float64
	offset orb.Point
	grid   int
}

// Geometry returns the geometry program data describes.
func Geometry(data []byte) orb.Geometry {
	g := &gen{r: reader{b: data}}
	g.scale = scales[g.r.n(len(scales))]
	g.grid = 2 + g.r.n(9)
	switch g.r.n(4) {
	case 1:
		g.offset = orb.Point{-65.79, 18.31}
	case 2:
		g.offset = orb.Point{float64(g.r.byte()) * 1e6, -float64(g.r.byte()) * 1e6}
	case 3:
		g.offset = orb.Point{0.1, 0.2}
	}
	return g.geometry(0)
}

// GeoJSON returns Geometry(data) as a GeoJSON geometry object, numbers in
// their shortest exact form.
func GeoJSON(data []byte) []byte {
	b, err := geojson.Append(nil, Geometry(data), nil)
	if err != nil {
		// Append fails only for non-finite numbers, which gen never makes.
		panic(err)
	}
	return b
}

func (g *gen) geometry(depth int) orb.Geometry {
	kind := g.r.n(10)
	if depth >= maxDepth && kind == 9 {
		kind = 0
	}
	switch kind {
	case 0, 1, 2:
		return g.polygon()
	case 3, 4:
		if g.r.n(3) == 0 {
			return g.concentric()
		}
		mp := make(orb.MultiPolygon, 1+g.r.n(maxParts))
		boxes := g.r.n(2) == 0
		for i := range mp {
			switch {
			case g.r.n(16) == 0:
				mp[i] = orb.Polygon{}
			case boxes:
				// Boxes on the grid: side by side, touching, nested.
				mp[i] = orb.Polygon{g.box()}
			default:
				mp[i] = g.polygon()
			}
		}
		return mp
	case 5:
		return orb.LineString(g.points(2+g.r.n(maxPoints), false))
	case 6:
		ml := make(orb.MultiLineString, 1+g.r.n(maxParts))
		for i := range ml {
			if g.r.n(8) == 0 {
				ml[i] = orb.LineString{}
				continue
			}
			ml[i] = orb.LineString(g.points(2+g.r.n(maxPoints), false))
		}
		return ml
	case 7:
		return orb.MultiPoint(g.points(1+g.r.n(maxPoints), false))
	case 8:
		return g.point()
	}
	c := make(orb.Collection, g.r.n(maxParts+1))
	for i := range c {
		c[i] = g.geometry(depth + 1)
	}
	return c
}

func (g *gen) polygon() orb.Polygon {
	p := make(orb.Polygon, 1+g.r.n(maxRings))
	if g.r.n(2) == 0 {
		for i := range p {
			p[i] = g.ring()
		}
		return p
	}
	if g.r.n(2) == 0 {
		return g.cells(len(p) - 1)
	}
	// A box shell with holes drawn inside its extent (on the grid, so
	// they touch it, each other, nest or overlap often).
	x0, y0 := g.r.n(g.grid), g.r.n(g.grid)
	x1, y1 := x0+2+g.r.n(2*g.grid), y0+2+g.r.n(2*g.grid)
	p[0] = g.boxAt(x0, y0, x1, y1)
	for i := 1; i < len(p); i++ {
		hx0, hy0 := x0+g.r.n(x1-x0), y0+g.r.n(y1-y0)
		hx1, hy1 := hx0+1+g.r.n(x1-hx0), hy0+1+g.r.n(y1-hy0)
		if g.r.n(4) == 0 {
			p[i] = g.convexAt(float64(hx0+hx1)/2, float64(hy0+hy1)/2, float64(min(hx1-hx0, hy1-hy0))/2)
			continue
		}
		p[i] = g.boxAt(hx0, hy0, hx1, hy1)
	}
	return p
}

// cells is a box shell cut into a grid of cells, four units a side, with
// holes in some cells: the cell itself (holes in neighbouring cells share
// edges), the cell shrunk by a unit on some sides, or a diamond touching
// the cell's edges at their midpoints (diamonds in neighbouring cells touch
// each other at a point, and a ring of them cuts the interior in two).
func (g *gen) cells(holes int) orb.Polygon {
	m := 2 + g.r.n(3)
	ox, oy := g.r.n(g.grid), g.r.n(g.grid)
	p := orb.Polygon{g.boxAt(ox, oy, ox+4*m, oy+4*m)}
	for range holes + g.r.n(4) {
		cx, cy := ox+4*g.r.n(m), oy+4*g.r.n(m)
		switch g.r.n(3) {
		case 0:
			p = append(p, g.boxAt(cx, cy, cx+4, cy+4))
		case 1:
			p = append(p, g.boxAt(cx+g.r.n(2), cy+g.r.n(2), cx+4-g.r.n(2), cy+4-g.r.n(2)))
		default:
			d := orb.Ring{g.at(float64(cx+2), float64(cy)), g.at(float64(cx+4), float64(cy+2)), g.at(float64(cx+2), float64(cy+4)), g.at(float64(cx), float64(cy+2))}
			if g.r.n(2) == 0 {
				d[1], d[3] = d[3], d[1]
			}
			p = append(p, append(d, d[0]))
		}
	}
	return p
}

// concentric is islands in lakes: boxes inside each other, each part a box
// with (usually) the next box inside as its hole, in either order; a part
// without its hole holds the next part as a nested shell.
func (g *gen) concentric() orb.MultiPolygon {
	n := 2 + g.r.n(3)
	ox, oy := g.r.n(g.grid), g.r.n(g.grid)
	size := 4*n + 2
	var mp orb.MultiPolygon
	for k := range n {
		a := 2 * k
		p := orb.Polygon{g.boxAt(ox+a, oy+a, ox+size-a, oy+size-a)}
		if g.r.n(4) != 0 {
			b := a + 1 - g.r.n(4)/3 // sometimes the hole touches the shell
			p = append(p, g.boxAt(ox+b, oy+b, ox+size-b, oy+size-b))
		}
		mp = append(mp, p)
	}
	if g.r.n(2) == 0 {
		for i, j := 0, len(mp)-1; i < j; i, j = i+1, j-1 {
			mp[i], mp[j] = mp[j], mp[i]
		}
	}
	return mp
}

// ring makes a ring: random positions (mostly self-intersecting), an
// axis-parallel box (touching, nested, overlapping others on the grid), or
// a convex polygon around a grid point.
func (g *gen) ring() orb.Ring {
	switch g.r.n(4) {
	case 0:
		return orb.Ring(g.points(3+g.r.n(maxPoints-2), true))
	case 1, 2:
		return g.box()
	}
	return g.convex()
}

// box is a rectangle on the grid, either way round, sometimes with extra
// vertices on its edges and a start at another corner.
func (g *gen) box() orb.Ring {
	x0, y0 := g.r.n(g.grid), g.r.n(g.grid)
	return g.boxAt(x0, y0, x0+1+g.r.n(g.grid), y0+1+g.r.n(g.grid))
}

// boxAt is a box with corners (x0, y0) and (x1, y1) on the grid.
func (g *gen) boxAt(x0, y0, x1, y1 int) orb.Ring {
	c := []orb.Point{g.at(float64(x0), float64(y0)), g.at(float64(x1), float64(y0)), g.at(float64(x1), float64(y1)), g.at(float64(x0), float64(y1))}
	if g.r.n(2) == 0 {
		c[1], c[3] = c[3], c[1]
	}
	start := g.r.n(4)
	ring := make(orb.Ring, 0, 10)
	for k := range 4 {
		a, b := c[(start+k)%4], c[(start+k+1)%4]
		ring = append(ring, a)
		if g.r.n(4) == 0 {
			ring = append(ring, orb.Point{a[0]/2 + b[0]/2, a[1]/2 + b[1]/2})
		}
	}
	return append(ring, ring[0])
}

// convex is a polygon of 3 to 8 vertices on a circle around a grid point.
func (g *gen) convex() orb.Ring {
	return g.convexAt(float64(g.r.n(g.grid)), float64(g.r.n(g.grid)), 0.5+float64(g.r.n(4)))
}

// convexAt is a polygon of 3 to 8 vertices on a circle.
func (g *gen) convexAt(cx, cy, rad float64) orb.Ring {
	n := 3 + g.r.n(6)
	dir := 1.0
	if g.r.n(2) == 0 {
		dir = -1
	}
	ring := make(orb.Ring, 0, n+1)
	for k := range n {
		a := dir * 2 * math.Pi * float64(k) / float64(n)
		ring = append(ring, g.at(cx+rad*math.Cos(a), cy+rad*math.Sin(a)))
	}
	return append(ring, ring[0])
}

// at scales and offsets a grid position.
func (g *gen) at(x, y float64) orb.Point {
	return orb.Point{clamp(x*g.scale + g.offset[0]), clamp(y*g.scale + g.offset[1])}
}

// clamp keeps v finite.
func clamp(v float64) float64 {
	if math.IsInf(v, 0) {
		return math.Copysign(math.MaxFloat64, v)
	}
	return v
}

// points makes n positions, closed into a ring when ring is set.
func (g *gen) points(n int, ring bool) []orb.Point {
	pts := make([]orb.Point, 0, n+2)
	for len(pts) < n {
		switch op := g.r.n(16); {
		case op == 0 && len(pts) > 0:
			pts = append(pts, pts[len(pts)-1]) // a repeated point
		case op == 1 && len(pts) > 1:
			pts = append(pts, g.nearCollinear(pts[len(pts)-2], pts[len(pts)-1]))
		case op == 2 && len(pts) > 0:
			pts = append(pts, pts[g.r.n(len(pts))]) // revisit a vertex
		default:
			pts = append(pts, g.point())
		}
	}
	if ring {
		pts = append(pts, pts[0])
	}
	return pts
}

// point is a grid point, scaled and offset, sometimes nudged a few ulps.
func (g *gen) point() orb.Point {
	p := g.at(float64(g.r.n(g.grid)), float64(g.r.n(g.grid)))
	x, y := p[0], p[1]
	if g.r.n(8) == 0 {
		x = nudge(x, g.r.n(5)-2)
		y = nudge(y, g.r.n(5)-2)
	}
	return orb.Point{x, y}
}

// nearCollinear is a point on the line through a and b (between, beyond
// or before them), then moved a few ulps.
func (g *gen) nearCollinear(a, b orb.Point) orb.Point {
	t := []float64{0.5, 2, -1, 1.0 / 3, 0.25, 1e-7}[g.r.n(6)]
	p := orb.Point{clamp(a[0] + t*(b[0]-a[0])), clamp(a[1] + t*(b[1]-a[1]))}
	p[0] = nudge(p[0], g.r.n(7)-3)
	p[1] = nudge(p[1], g.r.n(7)-3)
	if !finite(p) {
		return b
	}
	return p
}

// nudge moves v by k ulps.
func nudge(v float64, k int) float64 {
	for ; k > 0; k-- {
		v = math.Nextafter(v, math.Inf(1))
	}
	for ; k < 0; k++ {
		v = math.Nextafter(v, math.Inf(-1))
	}
	if math.IsInf(v, 0) {
		return math.Copysign(math.MaxFloat64, v)
	}
	return v
}

func finite(p orb.Point) bool {
	return !math.IsNaN(p[0]) && !math.IsInf(p[0], 0) && !math.IsNaN(p[1]) && !math.IsInf(p[1], 0)
}
