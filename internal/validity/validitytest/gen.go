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
		mp := make(orb.MultiPolygon, 1+g.r.n(maxParts))
		for i := range mp {
			if g.r.n(16) == 0 {
				mp[i] = orb.Polygon{}
				continue
			}
			mp[i] = g.polygon()
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
	for i := range p {
		p[i] = orb.Ring(g.points(3+g.r.n(maxPoints-2), true))
	}
	return p
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
	x := float64(g.r.n(g.grid))*g.scale + g.offset[0]
	y := float64(g.r.n(g.grid))*g.scale + g.offset[1]
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
	p := orb.Point{a[0] + t*(b[0]-a[0]), a[1] + t*(b[1]-a[1])}
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
