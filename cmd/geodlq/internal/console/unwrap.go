package console

import (
	"math"

	"github.com/paulmach/orb"
)

// unwrap makes a longitude/latitude geometry continuous across the
// antimeridian, for drawing: within each run of positions (a ring, a
// line) a position is moved by whole turns (±360°) to lie within 180° of
// the one before it, and each run starts within 180° of the first run's
// start; then the whole is moved by whole turns so that the middle of its
// longitudes lies within ±180°. A polygon crossing ±180° (Chukotka, Fiji)
// is then drawn as one shape reaching past 180° instead of a band around
// the world. A run that circles a pole (its unwrapped end is half a turn
// or more from its start, as Antarctica's outline) is left as it was.
//
// It returns the new geometry (g is not modified) and the longitude its
// middle lies at, for [nearLon].
func unwrap(g orb.Geometry) (orb.Geometry, float64) { return unwrapBy(g, 360) }

// unwrapBy is unwrap for a CRS whose x repeats every period (360° for
// longitude, 2π·6378137 m for Web Mercator).
func unwrapBy(g orb.Geometry, period float64) (orb.Geometry, float64) {
	u := unwrapper{period: period}
	out := u.walk(g)
	if !u.set {
		return out, 0
	}
	mid := (u.min + u.max) / 2
	if shift := -period * math.Round(mid/period); math.Abs(mid) > period/2 {
		out = shiftLon(out, shift)
		mid += shift
	}
	return out, mid
}

// nearLon moves lon by whole turns to lie within 180° of mid.
func nearLon(lon, mid float64) float64 { return nearBy(lon, mid, 360) }

// nearBy moves x by whole periods to lie within half a period of mid.
func nearBy(x, mid, period float64) float64 {
	return x - period*math.Round((x-mid)/period)
}

type unwrapper struct {
	period   float64
	ref      float64
	set      bool
	min, max float64
}

func (u *unwrapper) run(ps []orb.Point) []orb.Point {
	out := make([]orb.Point, len(ps))
	copy(out, ps)
	if len(out) == 0 {
		return out
	}
	if !u.set {
		u.ref, u.set, u.min, u.max = out[0][0], true, out[0][0], out[0][0]
	}
	out[0][0] = nearBy(out[0][0], u.ref, u.period)
	for i := 1; i < len(out); i++ {
		out[i][0] = nearBy(out[i][0], out[i-1][0], u.period)
	}
	if math.Abs(out[len(out)-1][0]-out[0][0]) >= u.period/2 {
		// Around a pole: as it was.
		copy(out, ps)
	}
	for _, p := range out {
		u.min, u.max = math.Min(u.min, p[0]), math.Max(u.max, p[0])
	}
	return out
}

func (u *unwrapper) walk(g orb.Geometry) orb.Geometry {
	switch g := g.(type) {
	case orb.Point:
		return orb.Point(u.run([]orb.Point{g})[0])
	case orb.MultiPoint:
		out := make(orb.MultiPoint, len(g))
		for i, p := range g {
			out[i] = u.run([]orb.Point{p})[0]
		}
		return out
	case orb.LineString:
		return orb.LineString(u.run(g))
	case orb.Ring:
		return orb.Ring(u.run(g))
	case orb.MultiLineString:
		out := make(orb.MultiLineString, len(g))
		for i, l := range g {
			out[i] = u.run(l)
		}
		return out
	case orb.Polygon:
		out := make(orb.Polygon, len(g))
		for i, r := range g {
			out[i] = u.run(r)
		}
		return out
	case orb.MultiPolygon:
		out := make(orb.MultiPolygon, len(g))
		for i, p := range g {
			out[i] = u.walk(p).(orb.Polygon)
		}
		return out
	case orb.Collection:
		out := make(orb.Collection, len(g))
		for i, m := range g {
			out[i] = u.walk(m)
		}
		return out
	}
	return g
}

// shiftLon adds d to every longitude of g, in place.
func shiftLon(g orb.Geometry, d float64) orb.Geometry {
	each := func(ps []orb.Point) {
		for i := range ps {
			ps[i][0] += d
		}
	}
	switch g := g.(type) {
	case orb.Point:
		return orb.Point{g[0] + d, g[1]}
	case orb.MultiPoint:
		each(g)
	case orb.LineString:
		each(g)
	case orb.Ring:
		each(g)
	case orb.MultiLineString:
		for _, l := range g {
			each(l)
		}
	case orb.Polygon:
		for _, r := range g {
			each(r)
		}
	case orb.MultiPolygon:
		for _, p := range g {
			for _, r := range p {
				each(r)
			}
		}
	case orb.Collection:
		for i, m := range g {
			g[i] = shiftLon(m, d)
		}
	}
	return g
}
