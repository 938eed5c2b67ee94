package validity

import (
	"math"

	"github.com/paulmach/orb"
)

// The segment intersector, as GEOS 3.11's LineIntersector (the robust one)
// computes it: which kind of intersection two segments have, and the point
// it reports. The point matters: it is the location GEOS names in its
// reason, so it is computed exactly as GEOS computes it (the conditioned
// homogeneous-coordinates formula, the snap to the nearest endpoint when
// rounding puts it outside both segments' envelopes).

// Intersection kinds.
const (
	noIntersection        = 0
	pointIntersection     = 1
	collinearIntersection = 2
)

// lineIntersector holds the outcome of the last segment intersection.
type lineIntersector struct {
	result uint8
	proper bool
	pt     [2]orb.Point
	// The input segments, for the envelope check of computed points.
	p1, p2, q1, q2 orb.Point
}

// minOf and maxOf are C's a < b ? a : b and a > b ? a : b, which GEOS's
// intersection formula uses; they differ from math.Min and math.Max on
// signed zeros, and the sign of a zero can reach a reason ("-0").
func minOf(a, b float64) float64 {
	if a < b {
		return a
	}
	return b
}

func maxOf(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}

// envIntersectsPoint reports whether q lies in the envelope of p1, p2.
func envIntersectsPoint(p1, p2, q orb.Point) bool {
	return q[0] >= minOf(p1[0], p2[0]) && q[0] <= maxOf(p1[0], p2[0]) &&
		q[1] >= minOf(p1[1], p2[1]) && q[1] <= maxOf(p1[1], p2[1])
}

// envIntersects reports whether the envelopes of segments p and q meet.
func envIntersects(p1, p2, q1, q2 orb.Point) bool {
	if minOf(p1[0], p2[0]) > maxOf(q1[0], q2[0]) || maxOf(p1[0], p2[0]) < minOf(q1[0], q2[0]) {
		return false
	}
	if minOf(p1[1], p2[1]) > maxOf(q1[1], q2[1]) || maxOf(p1[1], p2[1]) < minOf(q1[1], q2[1]) {
		return false
	}
	return true
}

// pointOnSegment is LineIntersector::hasIntersection(p, p1, p2).
func pointOnSegment(p, p1, p2 orb.Point) bool {
	return envIntersectsPoint(p1, p2, p) && orientation(p1, p2, p) == 0 && orientation(p2, p1, p) == 0
}

// compute intersects segments p1p2 and q1q2.
func (li *lineIntersector) compute(p1, p2, q1, q2 orb.Point) {
	li.p1, li.p2, li.q1, li.q2 = p1, p2, q1, q2
	li.proper = false
	li.result = li.computeIntersect(p1, p2, q1, q2)
}

func (li *lineIntersector) computeIntersect(p1, p2, q1, q2 orb.Point) uint8 {
	if !envIntersects(p1, p2, q1, q2) {
		return noIntersection
	}
	pq1 := orientation(p1, p2, q1)
	pq2 := orientation(p1, p2, q2)
	if (pq1 > 0 && pq2 > 0) || (pq1 < 0 && pq2 < 0) {
		return noIntersection
	}
	qp1 := orientation(q1, q2, p1)
	qp2 := orientation(q1, q2, p2)
	if (qp1 > 0 && qp2 > 0) || (qp1 < 0 && qp2 < 0) {
		return noIntersection
	}
	if pq1 == 0 && pq2 == 0 && qp1 == 0 && qp2 == 0 {
		return li.collinear(p1, p2, q1, q2)
	}
	var p orb.Point
	if pq1 == 0 || pq2 == 0 || qp1 == 0 || qp2 == 0 {
		switch {
		case p1 == q1, p1 == q2:
			p = p1
		case p2 == q1, p2 == q2:
			p = p2
		case pq1 == 0:
			p = q1
		case pq2 == 0:
			p = q2
		case qp1 == 0:
			p = p1
		default: // qp2 == 0
			p = p2
		}
	} else {
		li.proper = true
		p = li.intersection(p1, p2, q1, q2)
	}
	li.pt[0] = p
	return pointIntersection
}

func (li *lineIntersector) collinear(p1, p2, q1, q2 orb.Point) uint8 {
	q1inP := envIntersectsPoint(p1, p2, q1)
	q2inP := envIntersectsPoint(p1, p2, q2)
	p1inQ := envIntersectsPoint(q1, q2, p1)
	p2inQ := envIntersectsPoint(q1, q2, p2)
	switch {
	case q1inP && q2inP:
		li.pt[0], li.pt[1] = q1, q2
		return collinearIntersection
	case p1inQ && p2inQ:
		li.pt[0], li.pt[1] = p1, p2
		return collinearIntersection
	case q1inP && p1inQ:
		li.pt[0], li.pt[1] = q1, p1
		if q1 == p1 && !q2inP && !p2inQ {
			return pointIntersection
		}
		return collinearIntersection
	case q1inP && p2inQ:
		li.pt[0], li.pt[1] = q1, p2
		if q1 == p2 && !q2inP && !p1inQ {
			return pointIntersection
		}
		return collinearIntersection
	case q2inP && p1inQ:
		li.pt[0], li.pt[1] = q2, p1
		if q2 == p1 && !q1inP && !p2inQ {
			return pointIntersection
		}
		return collinearIntersection
	case q2inP && p2inQ:
		li.pt[0], li.pt[1] = q2, p2
		if q2 == p2 && !q1inP && !p1inQ {
			return pointIntersection
		}
		return collinearIntersection
	}
	return noIntersection
}

// intersection computes the proper intersection point of two segments.
func (li *lineIntersector) intersection(p1, p2, q1, q2 orb.Point) orb.Point {
	pt, ok := intersectionPoint(p1, p2, q1, q2)
	if !ok {
		pt = nearestEndpoint(p1, p2, q1, q2)
	}
	if !inEnvelope(li.p1, li.p2, pt) || !inEnvelope(li.q1, li.q2, pt) {
		pt = nearestEndpoint(p1, p2, q1, q2)
	}
	return pt
}

// inEnvelope is Envelope(a, b).contains(p).
func inEnvelope(a, b, p orb.Point) bool {
	var minx, maxx, miny, maxy float64
	if a[0] < b[0] {
		minx, maxx = a[0], b[0]
	} else {
		minx, maxx = b[0], a[0]
	}
	if a[1] < b[1] {
		miny, maxy = a[1], b[1]
	} else {
		miny, maxy = b[1], a[1]
	}
	return p[0] >= minx && p[0] <= maxx && p[1] >= miny && p[1] <= maxy
}

// intersectionPoint is GEOS's Intersection::intersection: the lines'
// intersection in homogeneous coordinates, conditioned by translating to
// the middle of the segments' common envelope. It reports false for
// parallel lines.
func intersectionPoint(p1, p2, q1, q2 orb.Point) (orb.Point, bool) {
	minX0 := minOf(p1[0], p2[0])
	minY0 := minOf(p1[1], p2[1])
	maxX0 := maxOf(p1[0], p2[0])
	maxY0 := maxOf(p1[1], p2[1])
	minX1 := minOf(q1[0], q2[0])
	minY1 := minOf(q1[1], q2[1])
	maxX1 := maxOf(q1[0], q2[0])
	maxY1 := maxOf(q1[1], q2[1])
	intMinX := maxOf(minX0, minX1)
	intMaxX := minOf(maxX0, maxX1)
	intMinY := maxOf(minY0, minY1)
	intMaxY := minOf(maxY0, maxY1)
	midx := (intMinX + intMaxX) / 2.0
	midy := (intMinY + intMaxY) / 2.0

	p1x, p1y := p1[0]-midx, p1[1]-midy
	p2x, p2y := p2[0]-midx, p2[1]-midy
	q1x, q1y := q1[0]-midx, q1[1]-midy
	q2x, q2y := q2[0]-midx, q2[1]-midy

	px := p1y - p2y
	py := p2x - p1x
	pw := float64(p1x*p2y) - float64(p2x*p1y)
	qx := q1y - q2y
	qy := q2x - q1x
	qw := float64(q1x*q2y) - float64(q2x*q1y)

	x := float64(py*qw) - float64(qy*pw)
	y := float64(qx*pw) - float64(px*qw)
	w := float64(px*qy) - float64(qx*py)

	xInt := x / w
	yInt := y / w
	if math.IsNaN(xInt) || math.IsInf(xInt, 0) || math.IsNaN(yInt) || math.IsInf(yInt, 0) {
		return orb.Point{}, false
	}
	return orb.Point{xInt + midx, yInt + midy}, true
}

// nearestEndpoint is the endpoint of either segment closest to the other.
func nearestEndpoint(p1, p2, q1, q2 orb.Point) orb.Point {
	nearest := p1
	minDist := pointToSegment(p1, q1, q2)
	if d := pointToSegment(p2, q1, q2); d < minDist {
		minDist, nearest = d, p2
	}
	if d := pointToSegment(q1, p1, p2); d < minDist {
		minDist, nearest = d, q1
	}
	if d := pointToSegment(q2, p1, p2); d < minDist {
		nearest = q2
	}
	return nearest
}

func distance(a, b orb.Point) float64 {
	dx, dy := a[0]-b[0], a[1]-b[1]
	return math.Sqrt(float64(dx*dx) + float64(dy*dy))
}

// pointToSegment is GEOS's Distance::pointToSegment.
func pointToSegment(p, a, b orb.Point) float64 {
	if a == b {
		return distance(p, a)
	}
	bax, bay := b[0]-a[0], b[1]-a[1]
	len2 := float64(bax*bax) + float64(bay*bay)
	r := (float64((p[0]-a[0])*bax) + float64((p[1]-a[1])*bay)) / len2
	if r <= 0.0 {
		return distance(p, a)
	}
	if r >= 1.0 {
		return distance(p, b)
	}
	s := (float64((a[1]-p[1])*bax) - float64((a[0]-p[0])*bay)) / len2
	return math.Abs(s) * math.Sqrt(len2)
}
