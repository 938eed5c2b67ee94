package geojson

import (
	"math"
	"slices"

	"github.com/paulmach/orb"
)

// Crossings estimates, in bounded work, how many pairs of segments of g's
// lines and rings intersect without sharing an endpoint: the noding a
// repair (GEOS MakeValid) has to do, whose cost grows much faster than the
// input (a 21 KB star polygon, a thousand vertices with half a million
// crossings, takes GEOS half a minute to repair).
//
// It returns as soon as the count exceeds limit. It reports ok == false
// when it gave up before deciding: when its grid would need more than four
// cells per segment (segments far longer than is typical of the geometry)
// or more than 16 pair tests per segment (segments packed densely without
// crossing). A caller bounding its work treats that as over the limit.
//
// Segments are bucketed in a grid whose cells are as long as an average
// segment, and pairs are tested within a cell; a pair that shares several
// cells is counted in each, so the count errs high. Non-finite positions
// end their segments.
func Crossings(g orb.Geometry, limit int) (n int, ok bool) {
	var runs [][]orb.Point
	nseg := 0
	var length float64
	bound := orb.Bound{Min: orb.Point{math.Inf(1), math.Inf(1)}, Max: orb.Point{math.Inf(-1), math.Inf(-1)}}
	Components(g, func(c Component) bool {
		if c.Kind == KindPoints || len(c.Points) < 2 {
			return true
		}
		runs = append(runs, c.Points)
		for i, p := range c.Points {
			if !finite(p) {
				continue
			}
			bound = bound.Extend(p)
			if i > 0 && finite(c.Points[i-1]) {
				nseg++
				length += math.Hypot(p[0]-c.Points[i-1][0], p[1]-c.Points[i-1][1])
			}
		}
		return true
	})
	if nseg < 2 {
		return 0, true
	}
	cell := length / float64(nseg)
	if span := math.Max(bound.Max[0]-bound.Min[0], bound.Max[1]-bound.Min[1]); cell < span/(1<<20) {
		cell = span / (1 << 20) // at most 2^20 cells a side, so keys fit
	}
	if cell == 0 || math.IsInf(cell, 0) || math.IsNaN(cell) {
		cell = 1
	}
	maxEntries := 4*nseg + 1024
	maxTests := 16*nseg + 1<<20

	// One entry per cell a segment passes through: the cell's key and the
	// segment's run and index.
	type entry struct {
		key      uint64
		run, seg int32
	}
	entries := make([]entry, 0, min(maxEntries, 2*nseg+16))
	add := func(x, y int64, r, i int) bool {
		if len(entries) >= maxEntries {
			return false
		}
		entries = append(entries, entry{key: uint64(x)<<32 | uint64(y), run: int32(r), seg: int32(i)})
		return true
	}
	for r, pts := range runs {
		for i := 1; i < len(pts); i++ {
			a, b := pts[i-1], pts[i]
			if !finite(a) || !finite(b) {
				continue
			}
			// Walk the cells the segment passes through (and both
			// neighbours where it passes through a corner).
			x0, y0 := (a[0]-bound.Min[0])/cell, (a[1]-bound.Min[1])/cell
			x1, y1 := (b[0]-bound.Min[0])/cell, (b[1]-bound.Min[1])/cell
			cx, cy := int64(x0), int64(y0)
			ex, ey := int64(x1), int64(y1)
			sx, sy := int64(1), int64(1)
			if ex < cx {
				sx = -1
			}
			if ey < cy {
				sy = -1
			}
			tx, dtx := math.Inf(1), math.Inf(1)
			if dx := x1 - x0; dx != 0 {
				dtx = math.Abs(1 / dx)
				tx = (float64(cx) + float64(max(sx, 0)) - x0) / dx
			}
			ty, dty := math.Inf(1), math.Inf(1)
			if dy := y1 - y0; dy != 0 {
				dty = math.Abs(1 / dy)
				ty = (float64(cy) + float64(max(sy, 0)) - y0) / dy
			}
			if !add(cx, cy, r, i-1) {
				return n, false
			}
			for cx != ex || cy != ey {
				switch {
				case cy == ey || cx != ex && tx < ty:
					cx, tx = cx+sx, tx+dtx
				case cx == ex || ty < tx:
					cy, ty = cy+sy, ty+dty
				default: // through a corner
					if !add(cx+sx, cy, r, i-1) || !add(cx, cy+sy, r, i-1) {
						return n, false
					}
					cx, tx, cy, ty = cx+sx, tx+dtx, cy+sy, ty+dty
				}
				if !add(cx, cy, r, i-1) {
					return n, false
				}
			}
		}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
	tests := 0
	for lo := 0; lo < len(entries); {
		hi := lo + 1
		for hi < len(entries) && entries[hi].key == entries[lo].key {
			hi++
		}
		for i := lo; i < hi; i++ {
			p := runs[entries[i].run][entries[i].seg:]
			for j := i + 1; j < hi; j++ {
				if tests++; tests > maxTests {
					return n, false
				}
				q := runs[entries[j].run][entries[j].seg:]
				if crosses(p[0], p[1], q[0], q[1]) {
					if n++; n > limit {
						return n, true
					}
				}
			}
		}
		lo = hi
	}
	return n, true
}

// crosses reports whether segments ab and cd intersect and share no
// endpoint.
func crosses(a, b, c, d orb.Point) bool {
	if a == c || a == d || b == c || b == d {
		return false
	}
	d1, d2 := orient(c, d, a), orient(c, d, b)
	d3, d4 := orient(a, b, c), orient(a, b, d)
	if (d1 > 0 && d2 < 0 || d1 < 0 && d2 > 0) && (d3 > 0 && d4 < 0 || d3 < 0 && d4 > 0) {
		return true
	}
	return d1 == 0 && within(c, d, a) || d2 == 0 && within(c, d, b) ||
		d3 == 0 && within(a, b, c) || d4 == 0 && within(a, b, d)
}

func orient(a, b, c orb.Point) float64 {
	return (b[0]-a[0])*(c[1]-a[1]) - (b[1]-a[1])*(c[0]-a[0])
}

// within reports whether p, collinear with ab, lies between a and b.
func within(a, b, p orb.Point) bool {
	return math.Min(a[0], b[0]) <= p[0] && p[0] <= math.Max(a[0], b[0]) &&
		math.Min(a[1], b[1]) <= p[1] && p[1] <= math.Max(a[1], b[1])
}
