package validity

import (
	"math"

	"github.com/paulmach/orb"
)

// Point location as GEOS 3.11 does it (RayCrossingCounter, PointLocation,
// IndexedPointInAreaLocator), and the ring nesting tests built on it.
//
// A ray-crossing count does not depend on the order in which segments are
// counted (a point on any segment is on the boundary; otherwise the parity
// of the crossings decides), so rings tested many times are indexed by
// their segments' y-ranges without changing any answer: a polygon with
// thousands of holes costs a query per hole, not a pass over its shell.

// Locations, GEOS's Location values.
const (
	interior = 0
	boundary = 1
	exterior = 2
)

// rayCounter is a RayCrossingCounter.
type rayCounter struct {
	p         orb.Point
	crossings int
	onSegment bool
}

// count is RayCrossingCounter::countSegment.
func (r *rayCounter) count(p1, p2 orb.Point) {
	px, py := r.p[0], r.p[1]
	if p1[0] < px && p2[0] < px {
		return
	}
	if px == p2[0] && py == p2[1] {
		r.onSegment = true
		return
	}
	if p1[1] == py && p2[1] == py {
		minx, maxx := p1[0], p2[0]
		if minx > maxx {
			minx, maxx = p2[0], p1[0]
		}
		if px >= minx && px <= maxx {
			r.onSegment = true
		}
		return
	}
	if (p1[1] > py && p2[1] <= py) || (p2[1] > py && p1[1] <= py) {
		sign := orientation(p1, p2, r.p)
		if sign == 0 {
			r.onSegment = true
			return
		}
		if p2[1] < p1[1] {
			sign = -sign
		}
		if sign > 0 {
			r.crossings++
		}
	}
}

func (r *rayCounter) location() int {
	if r.onSegment {
		return boundary
	}
	if r.crossings%2 == 1 {
		return interior
	}
	return exterior
}

// indexAfter is how many brute-force queries a large ring answers before
// it is indexed, and indexMin the smallest ring worth indexing.
const (
	indexAfter = 4
	indexMin   = 64
)

// yEntry is a segment's y-range in a yIndex.
type yEntry struct {
	miny, maxy float64
	seg        int32
}

// yIndex finds the segments of a ring whose y-range contains a value: the
// segments ordered by the bucket of their lowest y (a counting sort into
// about n/2 buckets of equal height), under a packed tree (yFan children a
// node) of the greatest y each subtree reaches. A query walks the entries
// whose bucket is at most the value's, skipping subtrees that stay below
// it.
type yIndex struct {
	entries []yEntry
	// levels[0][i] is entries[i].maxy; levels[k][i] the greatest of
	// levels[k-1][i*yFan : (i+1)*yFan]. The last level has one node.
	levels [][]float64
	span   []int // span[k]: entries under a node of level k
	// Buckets: bucket b holds entries[start[b]:start[b+1]].
	start      []int32
	miny, unit float64 // bucket b covers y in [miny + b/unit, miny + (b+1)/unit)
}

const yFan = 16

func newYIndex(pts []orb.Point) *yIndex {
	n := len(pts) - 1
	x := &yIndex{entries: make([]yEntry, n)}
	miny, maxy := pts[0][1], pts[0][1]
	for _, p := range pts[1:] {
		miny = min(miny, p[1])
		maxy = max(maxy, p[1])
	}
	nb := n/2 + 1
	x.miny = miny
	x.unit = float64(nb) / (maxy - miny)
	if math.IsNaN(x.unit) || math.IsInf(x.unit, 0) || x.unit <= 0 {
		nb, x.unit = 1, 0
	}
	x.start = make([]int32, nb+1)
	for i := range n {
		a, b := pts[i][1], pts[i+1][1]
		x.start[x.bucket(min(a, b))+1]++
	}
	for b := range nb {
		x.start[b+1] += x.start[b]
	}
	fill := append([]int32(nil), x.start[:nb]...)
	for i := range n {
		a, b := pts[i][1], pts[i+1][1]
		if a > b {
			a, b = b, a
		}
		k := x.bucket(a)
		x.entries[fill[k]] = yEntry{miny: a, maxy: b, seg: int32(i)}
		fill[k]++
	}
	level := make([]float64, n)
	for i, e := range x.entries {
		level[i] = e.maxy
	}
	x.levels = append(x.levels, level)
	x.span = append(x.span, 1)
	for len(level) > 1 {
		next := make([]float64, (len(level)+yFan-1)/yFan)
		for i := range next {
			m := math.Inf(-1)
			for _, v := range level[i*yFan : min((i+1)*yFan, len(level))] {
				m = max(m, v)
			}
			next[i] = m
		}
		x.levels = append(x.levels, next)
		x.span = append(x.span, x.span[len(x.span)-1]*yFan)
		level = next
	}
	return x
}

// bucket is the bucket of y, clamped to the buckets there are.
func (x *yIndex) bucket(y float64) int {
	t := (y - x.miny) * x.unit
	nb := len(x.start) - 1
	switch {
	case !(t >= 0):
		return 0
	case t >= float64(nb):
		return nb - 1
	}
	return int(t)
}

// collect appends to buf the segments whose y-range contains y.
func (x *yIndex) collect(y float64, buf []int32) []int32 {
	if len(x.entries) == 0 {
		return buf
	}
	end := int(x.start[x.bucket(y)+1])
	return x.walk(len(x.levels)-1, 0, y, end, buf)
}

// walk collects under node i of level k, within the first end entries.
func (x *yIndex) walk(k, i int, y float64, end int, buf []int32) []int32 {
	if x.levels[k][i] < y {
		return buf
	}
	if k == 0 {
		if x.entries[i].miny <= y {
			buf = append(buf, x.entries[i].seg)
		}
		return buf
	}
	below := x.levels[k-1]
	for c := i * yFan; c < min((i+1)*yFan, len(below)); c++ {
		if c*x.span[k-1] >= end {
			break
		}
		buf = x.walk(k-1, c, y, end, buf)
	}
	return buf
}

// ringLoc answers location queries about one ring, indexing it once it has
// been asked often enough.
type ringLoc struct {
	pts     []orb.Point
	queries int
	idx     *yIndex
	buf     []int32
	ccw     int8 // 0 unknown, 1 counter-clockwise, -1 not
}

func (r *ringLoc) indexed() *yIndex {
	if r.idx != nil {
		return r.idx
	}
	r.queries++
	if r.queries > indexAfter && len(r.pts) >= indexMin {
		r.idx = newYIndex(r.pts)
	}
	return r.idx
}

// count counts p's ray crossings with the ring.
func (r *ringLoc) count(rc *rayCounter) {
	if x := r.indexed(); x != nil {
		r.buf = x.collect(rc.p[1], r.buf[:0])
		for _, seg := range r.buf {
			rc.count(r.pts[seg], r.pts[seg+1])
		}
		return
	}
	for i := 1; i < len(r.pts); i++ {
		rc.count(r.pts[i-1], r.pts[i])
		if rc.onSegment {
			return
		}
	}
}

// locate is PointLocation::locateInRing.
func (r *ringLoc) locate(p orb.Point) int {
	rc := rayCounter{p: p}
	r.count(&rc)
	return rc.location()
}

// isCCW is Orientation::isCCW, remembered.
func (r *ringLoc) isCCW() bool {
	if r.ccw == 0 {
		r.ccw = -1
		if isCCW(r.pts) {
			r.ccw = 1
		}
	}
	return r.ccw == 1
}

// intersectingSegIndex is PolygonTopologyAnalyzer::intersectingSegIndex:
// the first segment p lies on (the next one when p is its end), or -1.
func (r *ringLoc) intersectingSegIndex(p orb.Point) int {
	pts := r.pts
	best := -1
	if x := r.indexed(); x != nil {
		r.buf = x.collect(p[1], r.buf[:0])
		for _, seg := range r.buf {
			i := int(seg)
			if (best < 0 || i < best) && pointOnSegment(p, pts[i], pts[i+1]) {
				best = i
			}
		}
	} else {
		for i := 0; i+1 < len(pts); i++ {
			if pointOnSegment(p, pts[i], pts[i+1]) {
				best = i
				break
			}
		}
	}
	if best >= 0 && p == pts[best+1] {
		return best + 1
	}
	return best
}

// isCCW is GEOS's Orientation::isCCW for a ring of at least four points.
func isCCW(ring []orb.Point) bool {
	nPts := len(ring) - 1
	if nPts < 3 {
		return false
	}
	upHi := ring[0]
	upLow := orb.Point{math.NaN(), math.NaN()}
	prevY := upHi[1]
	iUpHi := 0
	for i := 1; i <= nPts; i++ {
		py := ring[i][1]
		if py > prevY && py >= upHi[1] {
			iUpHi = i
			upHi = ring[i]
			upLow = ring[i-1]
		}
		prevY = py
	}
	if iUpHi == 0 {
		return false
	}
	iDownLow := iUpHi
	for {
		iDownLow = (iDownLow + 1) % nPts
		if iDownLow == iUpHi || ring[iDownLow][1] != upHi[1] {
			break
		}
	}
	downLow := ring[iDownLow]
	iDownHi := nPts - 1
	if iDownLow > 0 {
		iDownHi = iDownLow - 1
	}
	downHi := ring[iDownHi]
	if upHi == downHi {
		if upLow == upHi || downLow == upHi || upLow == downLow {
			return false
		}
		return orientation(upLow, upHi, downLow) == counterClockwise
	}
	return downHi[0]-upHi[0] < 0
}

// errNoIncidentSegment is GEOS's exception when a point it found on a
// ring's boundary lies on none of its segments.
type geosError string

func (e geosError) Error() string { return string(e) }

const errNoIncidentSegment = geosError("IllegalArgumentException: Segment vertex does not intersect ring")

// isRingNested is PolygonTopologyAnalyzer::isRingNested: whether ring test
// lies inside target, judged at test's first point, or when that point is
// on target's boundary, by the direction of test's first segment leaving
// it.
func isRingNested(test []orb.Point, target *ringLoc) (bool, error) {
	p0 := test[0]
	switch target.locate(p0) {
	case exterior:
		return false, nil
	case interior:
		return true, nil
	}
	p1 := findNonEqualVertex(test, p0)
	return isIncidentSegmentInRing(p0, p1, target)
}

func findNonEqualVertex(ring []orb.Point, p orb.Point) orb.Point {
	i := 1
	next := ring[i]
	for next == p && i < len(ring)-1 {
		i++
		next = ring[i]
	}
	return ring[i]
}

func isIncidentSegmentInRing(p0, p1 orb.Point, ring *ringLoc) (bool, error) {
	index := ring.intersectingSegIndex(p0)
	if index < 0 {
		return false, errNoIncidentSegment
	}
	pts := ring.pts
	n := len(pts)
	iPrev := index
	for pts[iPrev] == p0 {
		if iPrev == 0 {
			iPrev = n - 2
		} else {
			iPrev--
		}
	}
	iNext := index + 1
	for pts[iNext] == p0 {
		if iNext >= n-2 {
			iNext = 0
		} else {
			iNext++
		}
	}
	rPrev, rNext := pts[iPrev], pts[iNext]
	if ring.isCCW() {
		rPrev, rNext = rNext, rPrev
	}
	return isInteriorSegment(p0, rPrev, rNext, p1), nil
}

// polyLoc is an IndexedPointInAreaLocator over a polygon's rings.
type polyLoc struct {
	rings []ringLoc
}

// locate is IndexedPointInAreaLocator::locate: the crossings of every ring
// count together.
func (l *polyLoc) locate(p orb.Point) int {
	rc := rayCounter{p: p}
	for i := range l.rings {
		r := &l.rings[i]
		if x := r.indexed(); x != nil {
			r.buf = x.collect(p[1], r.buf[:0])
			for _, seg := range r.buf {
				rc.count(r.pts[seg], r.pts[seg+1])
			}
			continue
		}
		for j := 1; j < len(r.pts); j++ {
			rc.count(r.pts[j-1], r.pts[j])
		}
	}
	return rc.location()
}
