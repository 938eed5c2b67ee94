package validity

import (
	"slices"

	"github.com/paulmach/orb"
)

// The polygon topology analysis of GEOS 3.11 (PolygonTopologyAnalyzer,
// PolygonIntersectionAnalyzer, PolygonRing, PolygonNode), for the OGC
// rules GEOSisValidReason applies (a ring may not touch itself).

// Fault codes, GEOS's TopologyValidationError numbers.
const (
	codeNone              = -1
	codeHoleOutsideShell  = 2
	codeNestedHoles       = 3
	codeDisconnected      = 4
	codeSelfIntersection  = 5
	codeRingSelfIntersect = 6
	codeNestedShells      = 7
	codeTooFewPoints      = 9
	codeInvalidCoordinate = 10
	codeRingNotClosed     = 11
)

// polyRing is a PolygonRing: a ring of a polygon that has holes, with the
// rings of the same polygon it touches.
type polyRing struct {
	id        int32 // -1 for the shell, else the hole's index
	shell     int32 // the index of its polygon's shell in analyzer.rings
	touchRoot int32 // the root of the touch set it was reached from, or -1
	touches   []touch
}

// touch is a PolygonRingTouch: another ring of the polygon, and where.
type touch struct {
	ring int32 // index in analyzer.rings
	id   int32 // that ring's id, the order GEOS keeps touches in
	pt   orb.Point
}

// pairKey identifies two rings that touch, lower index first.
type pairKey struct{ a, b int32 }

// analyzer is a PolygonTopologyAnalyzer over the polygons of one Polygon
// or MultiPolygon. Its slices are reused from one geometry to the next.
type analyzer struct {
	ss     []segString
	rings  []polyRing
	chains []chain
	tree   strTree
	// The fast path's sort keys, scratch, and sorted chain extents.
	sweepKeys, sweepTmp []uint64
	sweepBuf            []sweepEntry
	// pairs records the one point at which two rings touch.
	pairs map[pairKey]orb.Point
	// dedup holds rings with repeated points removed.
	dedup []orb.Point

	// judge judges pairs of segments for the sequential searches.
	judge
	// workers is how many goroutines a large sweep may use; judges are
	// theirs.
	workers int
	judges  []judge
}

// judge judges pairs of segments as PolygonIntersectionAnalyzer does and
// keeps what it found. The analyzer has one; each worker of a parallel
// sweep has its own, which only records touches (deferTouches) for the
// analyzer to add once the workers are done.
type judge struct {
	a  *analyzer
	li lineIntersector

	invalidCode     int
	invalidLocation orb.Point
	doubleTouch     bool
	doubleTouchPt   orb.Point

	deferTouches bool
	touches      []touchRecord
}

// touchRecord is a touch a worker found: rings r0 and r1 meet at pt.
type touchRecord struct {
	r0, r1 int32
	pt     orb.Point
}

func (a *analyzer) reset() {
	a.judge.a = a
	a.ss = a.ss[:0]
	a.rings = a.rings[:0]
	a.chains = a.chains[:0]
	a.dedup = a.dedup[:0]
	clear(a.pairs)
	a.invalidCode = codeNone
	a.doubleTouch = false
}

// done is PolygonIntersectionAnalyzer::isDone.
func (j *judge) done() bool { return j.invalidCode >= 0 || j.doubleTouch }

// addPolygon adds a non-empty polygon's rings (shell first) as segment
// strings, with PolygonRings when it has holes.
func (a *analyzer) addPolygon(poly orb.Polygon) {
	shell := int32(-1)
	if len(poly) > 1 {
		shell = int32(len(a.rings))
		a.rings = append(a.rings, polyRing{id: -1, shell: shell, touchRoot: -1})
	}
	a.addSegString(poly[0], shell)
	for j, hole := range poly[1:] {
		if len(hole) == 0 {
			continue
		}
		r := int32(len(a.rings))
		a.rings = append(a.rings, polyRing{id: int32(j), shell: shell, touchRoot: -1})
		a.addSegString(hole, r)
	}
}

// addSegString adds a ring, without its consecutive repeated points (as
// RepeatedPointRemover removes them: a point equal to the last one kept,
// or whose squared distance to it underflows to zero).
func (a *analyzer) addSegString(pts orb.Ring, ring int32) {
	repeated := false
	for i := 1; i < len(pts); i++ {
		if pts[i] == pts[i-1] {
			repeated = true
			break
		}
	}
	if repeated {
		start := len(a.dedup)
		last := -1
		for i, p := range pts {
			if last >= 0 {
				q := pts[last]
				dx, dy := p[0]-q[0], p[1]-q[1]
				if p == q || float64(dx*dx)+float64(dy*dy) <= 0 {
					continue
				}
			}
			a.dedup = append(a.dedup, p)
			last = i
		}
		a.ss = append(a.ss, segString{pts: a.dedup[start:len(a.dedup):len(a.dedup)], ring: ring})
		return
	}
	a.ss = append(a.ss, segString{pts: pts, ring: ring})
}

// analyze runs the intersection search over the segment strings added.
func (a *analyzer) analyze() {
	// A chain spans at least one segment: room for as many chains as
	// there are segments when the rings are small (many small rings,
	// where nearly every segment is a chain of its own), and for an
	// eighth of them otherwise, so that growing the slice does not
	// dominate the peak memory of a check.
	segs := 0
	for i := range a.ss {
		segs += max(len(a.ss[i].pts)-1, 0)
	}
	a.chains = slices.Grow(a.chains[:0], min(segs, 4*len(a.ss)+segs/8))
	a.addAllChains(segs)
	if a.sweep() {
		return
	}
	a.restart()
	a.intersectChains()
}

// process is PolygonIntersectionAnalyzer::processIntersections.
func (j *judge) process(ss0 int32, i0 int, ss1 int32, i1 int) {
	if ss0 == ss1 && i0 == i1 {
		return
	}
	if code := j.findInvalid(ss0, i0, ss1, i1); code != codeNone {
		j.invalidCode = code
		j.invalidLocation = j.li.pt[0]
	}
}

func (j *judge) findInvalid(ss0 int32, i0 int, ss1 int32, i1 int) int {
	a := j.a
	s0, s1 := &a.ss[ss0], &a.ss[ss1]
	p00, p01 := s0.pts[i0], s0.pts[i0+1]
	p10, p11 := s1.pts[i1], s1.pts[i1+1]
	li := &j.li
	li.compute(p00, p01, p10, p11)
	if li.result == noIntersection {
		return codeNone
	}
	same := ss0 == ss1
	if li.proper || li.result == collinearIntersection {
		return codeSelfIntersection
	}
	pt := li.pt[0]
	if same && adjacentInRing(len(s0.pts), i0, i1) {
		return codeNone
	}
	if same {
		return codeRingSelfIntersect
	}
	if pt == p01 || pt == p11 {
		return codeNone
	}
	e00, e01 := p00, p01
	if pt == p00 {
		e00 = prevInRing(s0.pts, i0)
	}
	e10, e11 := p10, p11
	if pt == p10 {
		e10 = prevInRing(s1.pts, i1)
	}
	if isCrossing(pt, e00, e01, e10, e11) {
		return codeSelfIntersection
	}
	if j.deferTouches {
		if s0.ring >= 0 && s1.ring >= 0 && a.rings[s0.ring].shell == a.rings[s1.ring].shell {
			j.touches = append(j.touches, touchRecord{s0.ring, s1.ring, pt})
		}
		return codeNone
	}
	if a.addTouch(s0.ring, s1.ring, pt) {
		j.doubleTouch = true
		j.doubleTouchPt = pt
	}
	return codeNone
}

// adjacentInRing is isAdjacentInRing for a string of n points.
func adjacentInRing(n, i0, i1 int) bool {
	d := i0 - i1
	if d < 0 {
		d = -d
	}
	return d <= 1 || d >= n-2
}

// prevInRing is the point before segment i's start, around the ring.
func prevInRing(pts []orb.Point, i int) orb.Point {
	if i == 0 {
		return pts[len(pts)-2]
	}
	return pts[i-1]
}

// addTouch is PolygonRing::addTouch: it records that rings r0 and r1 (of
// the same polygon) touch at pt, and reports whether they already touched
// elsewhere (a double touch, which disconnects the interior).
func (a *analyzer) addTouch(r0, r1 int32, pt orb.Point) bool {
	if r0 < 0 || r1 < 0 {
		return false
	}
	if a.rings[r0].shell != a.rings[r1].shell {
		return false
	}
	k := pairKey{r0, r1}
	if r1 < r0 {
		k = pairKey{r1, r0}
	}
	if at, ok := a.pairs[k]; ok {
		return at != pt
	}
	if a.pairs == nil {
		a.pairs = make(map[pairKey]orb.Point)
	}
	a.pairs[k] = pt
	a.rings[r0].touches = append(a.rings[r0].touches, touch{ring: r1, id: a.rings[r1].id, pt: pt})
	a.rings[r1].touches = append(a.rings[r1].touches, touch{ring: r0, id: a.rings[r0].id, pt: pt})
	return false
}

// holeCycle is PolygonRing::findHoleCycleLocation over every ring: the
// point where the touches of a polygon's rings close a cycle (which cuts
// its interior in two), if any.
func (a *analyzer) holeCycle() (orb.Point, bool) {
	for i := range a.rings {
		// GEOS keeps touches in a map ordered by ring id.
		slices.SortFunc(a.rings[i].touches, func(x, y touch) int { return int(x.id) - int(y.id) })
	}
	type ref struct{ ring, touch int32 }
	var stack []ref
	for i := range a.rings {
		root := &a.rings[i]
		if root.touchRoot >= 0 {
			continue
		}
		root.touchRoot = int32(i)
		if len(root.touches) == 0 {
			continue
		}
		stack = stack[:0]
		for j := range root.touches {
			a.rings[root.touches[j].ring].touchRoot = int32(i)
			stack = append(stack, ref{int32(i), int32(j)})
		}
		for len(stack) > 0 {
			cur := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			t := a.rings[cur.ring].touches[cur.touch]
			ring := &a.rings[t.ring]
			for j := range ring.touches {
				next := ring.touches[j]
				if next.pt == t.pt {
					continue
				}
				if a.rings[next.ring].touchRoot == int32(i) {
					return next.pt, true
				}
				a.rings[next.ring].touchRoot = int32(i)
				stack = append(stack, ref{t.ring, int32(j)})
			}
		}
	}
	return orb.Point{}, false
}

// isCrossing is PolygonNode::isCrossing: whether edges b0, b1 at node
// cross the corner a0, a1.
func isCrossing(node, a0, a1, b0, b1 orb.Point) bool {
	aLo, aHi := a0, a1
	if isAngleGreater(node, aLo, aHi) {
		aLo, aHi = a1, a0
	}
	return isBetween(node, b0, aLo, aHi) != isBetween(node, b1, aLo, aHi)
}

// isInteriorSegment is PolygonNode::isInteriorSegment.
func isInteriorSegment(node, a0, a1, b orb.Point) bool {
	aLo, aHi := a0, a1
	interiorBetween := true
	if isAngleGreater(node, aLo, aHi) {
		aLo, aHi = a1, a0
		interiorBetween = false
	}
	between := isBetween(node, b, aLo, aHi)
	return between == interiorBetween
}

func isBetween(origin, p, e0, e1 orb.Point) bool {
	if !isAngleGreater(origin, p, e0) {
		return false
	}
	return !isAngleGreater(origin, p, e1)
}

func isAngleGreater(origin, p, q orb.Point) bool {
	qp := quadrantOf(p[0]-origin[0], p[1]-origin[1])
	qq := quadrantOf(q[0]-origin[0], q[1]-origin[1])
	if qp > qq {
		return true
	}
	if qp < qq {
		return false
	}
	return orientation(origin, q, p) == counterClockwise
}

// quadrantOf is Quadrant::quadrant(dx, dy) for a non-zero vector.
func quadrantOf(dx, dy float64) int {
	if dx >= 0 {
		if dy >= 0 {
			return 0
		}
		return 3
	}
	if dy >= 0 {
		return 1
	}
	return 2
}
